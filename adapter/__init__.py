"""Rightsizer's scaling-signal adapter: HPA's external/custom metrics APIs and KEDA's external scaler.

Reads its values from Prometheus (or Thanos, Mimir, VictoriaMetrics) or straight from the
exporters, caches one vector per rule per refresh, and answers every HPA and KEDA request from
that cache. Entry point: ``rightsizer-adapter`` (``adapter.cli:main``).
"""

from rightsizer_core.early import exit_quietly_while_importing

exit_quietly_while_importing("rightsizer-adapter")  # before anything heavy is imported

from rightsizer_core import __version__ as __version__  # noqa: E402
