"""Profiling ratios from the node's dcgm-exporter, for GPUs whose NVML has no GPM (before Hopper).

``settings``: the ``dcgm_exporter`` section; ``page``: its /metrics page read as it arrives, bounded,
into ratios per GPU or MIG instance; ``extension``: the poller and the merge into each cycle's
samples (NVML's own fields first).
"""
