"""prometheus-adapter's configuration file (``rules``, ``externalRules``), served unchanged.

``schema`` reads and checks the file, ``naming`` turns discovered series into metric names and
resources, ``batching`` rewrites each ``metricsQuery`` into one query per metric per refresh,
``combined`` sends the queries of all the metrics of one rule as one, and ``source`` discovers
series on a relist interval and feeds the adapter's cache; ``per_request`` answers the metrics that
cannot be batched, as prometheus-adapter does (HPA and KEDA).
"""
