"""Queue depth as a scaling signal: inference servers' /metrics, Redis keys and HTTP JSON endpoints.

``settings`` holds the schema of one ``queues:`` entry; ``scrape``, ``redis`` and ``http_json``
read one source each; ``poller`` runs one source on its schedule; ``manager`` is the sampler
extension that starts the pollers and publishes their latest values. Kept import-light: the
configuration module imports ``settings`` only.
"""
