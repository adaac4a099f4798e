"""Pod attribution: which pod, namespace and container each GPU (or MIG instance) belongs to.

``client`` asks the kubelet's pod-resources API, ``cgroup`` and ``checkpoint`` read the host,
``attribution`` decides, and ``extension`` runs it all on its own cadence off the scrape path.
Kept free of imports here so the configuration schema can load ``settings`` without gRPC.
"""
