"""dcgm-exporter's /metrics page, read for its profiling (DCP) ratios, per GPU or MIG instance.

dcgm-exporter writes one sample line per field and entity, labelled ``gpu``, ``UUID`` (``uuid`` in
its 1.x-compatible mode), ``pci_bus_id``, ``device``, ``modelName``, on a MIG instance also
``GPU_I_PROFILE`` and ``GPU_I_ID`` (its UUID label is then the parent GPU's), ``Hostname`` (newer
``hostname``) and, with pod mapping, ``pod``/``namespace``/``container``: a GPU shared by several
pods has one line per pod, all with the GPU's value. Ratios are 0-1 (``%f``), bytes per second are
integers.

The answer is read as it arrives (``SampleLines``): only the DCGM_FI_PROF_* lines are kept, capped
in number and length; an answer with no ``DCGM_FI_`` (1.x: ``dcgm_``) name at all is not a
dcgm-exporter page. A value outside its range (a ratio above 1, as DCGM reports for some MIG
instances, NaN, a negative rate) is left out and counted, never published.
"""

from __future__ import annotations

import codecs
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families as text_families

from ..queues.base import QueueSourceError, shorten
from ..queues.lines import SampleLines

# dcgm-exporter's field name -> the snapshot field it fills, and whether it is a 0-1 ratio.
FIELDS: Mapping[str, tuple[str, bool]] = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gr_engine_active_ratio", True),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active_ratio", True),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("sm_occupancy_ratio", True),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active_ratio", True),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_active_ratio", True),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("pcie_tx_bytes_per_second", False),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("pcie_rx_bytes_per_second", False),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": ("nvlink_tx_bytes_per_second", False),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": ("nvlink_rx_bytes_per_second", False),
    # Its 1.x-compatible names (etc/1.x-compatibility-metrics.csv), ratios only: PCIe there is a
    # byte counter, not a rate.
    "dcgm_fi_prof_gr_engine_active": ("gr_engine_active_ratio", True),
    "dcgm_fi_prof_sm_active": ("sm_active_ratio", True),
    "dcgm_fi_prof_sm_occupancy": ("sm_occupancy_ratio", True),
    "dcgm_fi_prof_pipe_tensor_active": ("tensor_active_ratio", True),
    "dcgm_fi_prof_dram_active": ("dram_active_ratio", True),
}
SIGNATURES = (b"DCGM_FI_", b"dcgm_")
# (UUID of the GPU, GPU instance id or None for a whole GPU)
Entity = tuple[str, str | None]


@dataclass(frozen=True)
class Page:
    """What one answer said: snapshot fields per entity, and the values refused as out of range."""

    values: Mapping[Entity, Mapping[str, float]]
    series: int  # DCGM_FI_PROF_* sample lines read
    rejected: tuple[str, ...] = ()  # "<name> of <entity>: <why>", at most a few


@dataclass
class PageScan:
    """One answer, fed as it arrives (``feed``), read at its end (``finish``)."""

    openmetrics: bool
    max_series: int
    max_series_bytes: int
    lines: SampleLines = field(init=False)
    _seen_dcgm: bool = field(default=False, init=False)
    _tail: bytes = field(default=b"", init=False)

    def __post_init__(self) -> None:
        self.lines = SampleLines(FIELDS, self.max_series, self.max_series_bytes)
        self._utf8 = codecs.getincrementaldecoder("utf-8")()

    def feed(self, chunk: bytes) -> None:
        try:
            self._utf8.decode(chunk)
        except UnicodeDecodeError:
            raise QueueSourceError("answer is not UTF-8 text") from None
        if not self._seen_dcgm:
            data = self._tail + chunk
            self._seen_dcgm = any(sig in data for sig in SIGNATURES)
            self._tail = data[-7:]
        self.lines.feed(chunk)

    def finish(self) -> Page:
        try:
            self._utf8.decode(b"", final=True)
        except UnicodeDecodeError:
            raise QueueSourceError("answer is not UTF-8 text") from None
        self.lines.finish()
        if not self._seen_dcgm:
            raise QueueSourceError("answer has no DCGM_FI_ (or dcgm_) series: not a dcgm-exporter page")
        return parse_lines(self.lines.take(), self.openmetrics, self.lines.series)


def read_page(
    text: str, openmetrics: bool = False, max_series: int = 4096, max_series_bytes: int = 4096
) -> Page:
    """A whole page read at once (tests, and the simulated fleet's own page)."""
    scan = PageScan(openmetrics, max_series, max_series_bytes)
    scan.feed(text.encode())
    return scan.finish()


def parse_lines(lines: list[bytes], openmetrics: bool, series: int) -> Page:
    values: dict[Entity, dict[str, float]] = {}
    rejected: list[str] = []
    if not lines:
        return Page({}, 0)
    text = b"\n".join(lines).decode() + "\n"
    try:
        families = openmetrics_families(text + "# EOF\n") if openmetrics else text_families(text)
        samples = [s for f in families for s in f.samples]
    except Exception as exc:  # prometheus-client raises ValueError and friends on bad input
        raise QueueSourceError(f"cannot parse the page: {shorten(str(exc), 120)}") from None
    for s in samples:
        known = FIELDS.get(s.name)
        if known is None:  # an OpenMetrics _created or similar: not a value
            continue
        target, ratio = known
        uuid = s.labels.get("UUID") or s.labels.get("uuid")
        if not uuid:
            continue  # a line of no GPU (dcgm-exporter writes none; a hostile page might)
        entity: Entity = (uuid, s.labels.get("GPU_I_ID") or None)
        why = _out_of_range(s.value, ratio)
        if why is not None:
            if len(rejected) < 8:
                rejected.append(f"{s.name} of {_entity_name(entity)}: {why}")
            continue
        fields = values.setdefault(entity, {})
        # A GPU shared by several pods has a line per pod, each with the GPU's value.
        fields[target] = max(fields.get(target, s.value), s.value)
    return Page(values, series, tuple(rejected))


def _out_of_range(value: float, ratio: bool) -> str | None:
    if math.isnan(value) or math.isinf(value):
        return f"{value} is not a number"
    if value < 0:
        return f"{value:g} is negative"
    if ratio and value > 1.0:
        return f"{value:g} is above 1 (a ratio)"
    return None


def _entity_name(entity: Entity) -> str:
    uuid, instance = entity
    return uuid if instance is None else f"{uuid} GPU instance {instance}"
