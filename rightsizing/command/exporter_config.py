"""The sections of the exporter's configuration file that ``rightsizer`` reads (``--exporter-config``).

The report and the plan use the same prices, extra GPUs and right-sizing thresholds as the exporter
that measured the fleet: the file's ``catalog``, ``rightsizing`` and ``patches`` sections, checked against the
engine's own schemas exactly as the exporter checks them. The file's other sections belong to the
exporter (which checks them when it starts) and are not read here, so the command does not depend
on the exporter's code.
"""

from __future__ import annotations

from dataclasses import dataclass

from rightsizer_core.settings import ConfigError, build, read_yaml, setting

from ..catalog import CatalogSettings
from ..patches.settings import PatchSettings
from ..settings import RightsizingSettings

SECTIONS = ("catalog", "rightsizing", "patches")


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
    try:
        return build(EngineSettings, {k: v for k, v in data.items() if k in SECTIONS}, "")
    except ConfigError as exc:
        raise exc.within(path) from None
