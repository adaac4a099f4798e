"""Latency SLOs: histograms of request latency, what a service declares it needs, and the verdicts
they decide.

``latency`` (latency histograms: quantiles, shares at or under a target) and ``latency_window``
(a histogram's window from cumulative counts); ``attainment`` (declared targets and what a window of
histograms says about them); ``windows`` (the tracker keeping each workload's windows, and the short
scaling window); ``projection`` (a latency at the objective projected onto another option);
``verdict`` (the SLO's say on a verdict); ``summary`` (an SLO as JSON and in words).
"""
