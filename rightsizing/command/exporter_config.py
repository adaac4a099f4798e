"""The sections of the exporter's configuration file that ``rightsizer`` reads (``--exporter-config``).

The report and the plan use the same prices, extra GPUs and right-sizing thresholds as the exporter
that measured the fleet: the file's ``catalog``, ``rightsizing`` and ``patches`` sections, checked against the
engine's own schemas exactly as the exporter checks them. The file's other sections belong to the
exporter (which checks them when it starts) and are not read here, so the command does not depend
on the exporter's code; a top-level key the exporter does not know is refused here as the exporter
refuses it (``EXPORTER_KEYS``, kept equal to the exporter's settings by a test), so a typo of a section
(``catlog``) is not a file whose prices were silently left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from rightsizer_core.settings import ConfigError, build, closest_key, read_yaml, setting

from ..catalog import CatalogSettings
from ..patches.settings import PatchSettings
from ..settings import RightsizingSettings

SECTIONS = ("catalog", "rightsizing", "patches")
# Every top-level key of the exporter's configuration (exporter/config.py's ExporterConfig).
EXPORTER_KEYS = (
    "catalog", "dcgm_exporter", "discovery", "families", "hostname", "hostname_label", "http", "interval",
    "listen", "log_level", "nvml", "patches", "pods", "queues", "rightsizing", "simulate", "slos",
)  # fmt: skip


@dataclass(frozen=True)
class EngineSettings:
    catalog: CatalogSettings = setting(
        CatalogSettings(), "GPU catalog: price overrides and extra GPUs for recommendations."
    )
    rightsizing: RightsizingSettings = setting(
        RightsizingSettings(), "Right-sizing: windows, verdict and bottleneck thresholds, queue links."
    )
    patches: PatchSettings = setting(
        PatchSettings(), "Patches for recommendations: MIG strategy, prices and history they need."
    )


def read_exporter_config(path: str | None) -> EngineSettings:
    """The engine's sections of an exporter configuration file (defaults without one). Raises
    ConfigError naming the file and the key."""
    if path is None:
        return EngineSettings()
    data = read_yaml(path)
    known = ", ".join(EXPORTER_KEYS)
    unknown = [
        f"unknown key {k!r} (known keys: {known}){closest_key(k, EXPORTER_KEYS)}"
        for k in data
        if k not in EXPORTER_KEYS
    ]
    try:
        if unknown:
            raise ConfigError(*unknown)
        return build(EngineSettings, {k: v for k, v in data.items() if k in SECTIONS}, "")
    except ConfigError as exc:
        raise exc.within(path) from None
