"""Inference servers found on the node: the kubelet's pod list, read on a cadence of its own.

``settings`` holds the ``discovery`` section; ``targets`` picks the annotated pods' servers (pure);
``kubelet`` reads the pod list and probes a page whose kind nothing else tells; ``gpus`` links each
pod to its own devices by pod UID; ``extension`` runs it all and hands the servers to the queue
extension's pollers. Kept free of imports here so the configuration schema can load ``settings``.
"""
