"""prometheus-adapter's configuration file (``rules``, ``externalRules``), served unchanged.

``schema`` reads and checks the file, ``naming`` turns discovered series into metric names and
resources, ``batching`` rewrites each ``metricsQuery`` into one query per metric per refresh, and
``source`` discovers series on a relist interval and feeds the adapter's cache.
"""
