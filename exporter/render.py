"""Render a Snapshot into Prometheus exposition bytes, once per sampling cycle.

Why not ``prometheus_client.generate_latest``: it renames every counter to ``<name>_total``, which
would break dcgm-exporter's counter names (``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``), and it
rebuilds every label string on every call. This renderer caches each GPU's label string across
cycles and renders a snapshot in the format a scraper asks for (text 0.0.4 or OpenMetrics 1.0, which
differ in their family headers only), once per format.
Its output is checked by prometheus-client's own parsers and by ``promtool check metrics`` in the
tests.

In OpenMetrics a counter's samples must end in ``_total``; dcgm-exporter's counters do not, so
there they are typed ``unknown`` (same sample names, so every query still matches).
"""

from __future__ import annotations

import gzip
import math
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from functools import partial

from rightsizer_core.snapshot import GpuIdentity, GpuSample, PodRef, Snapshot

from . import __version__
from .metrics import CLOCK_EVENT_REASONS, FAMILIES, Family

# prometheus-client's OpenMetrics CONTENT_TYPE_LATEST (a test keeps them equal), written out because
# importing its exposition modules (registry, WSGI server, ...) costs every exporter ~1 MiB.
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
_Labels = Callable[[GpuSample], tuple[str, str]]
__all__ = ["OPENMETRICS_CONTENT_TYPE", "Exposition", "Renderer", "format_value"]


def format_value(value: float) -> str:
    """Format a sample value as Go's Prometheus libraries do (integers without a fraction)."""
    if -1e15 < value < 1e15:  # False for NaN and the infinities
        integral = int(value)
        return str(integral) if integral == value else repr(float(value))
    if value != value:
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _label_string(pairs: Iterable[tuple[str, str]]) -> str:
    return ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)


class Exposition:
    """One snapshot's /metrics bytes: each format (text 0.0.4, OpenMetrics) rendered when first asked
    for, and its gzip variant compressed when first asked for. A scraper that takes gzip keeps only
    the compressed bytes: the plain ones are rendered again if someone asks for them later."""

    __slots__ = ("_cache", "_lock", "_make")

    def __init__(self, make: Callable[[bool], bytes]) -> None:
        self._make = make  # openmetrics? -> the document's bytes
        self._cache: dict[tuple[bool, bool], bytes] = {}
        self._lock = threading.Lock()

    @property
    def text(self) -> bytes:
        return self.body(False, False)

    @property
    def openmetrics(self) -> bytes:
        return self.body(True, False)

    def cached(self, openmetrics: bool, gzipped: bool) -> bytes | None:
        return self._cache.get((openmetrics, gzipped))

    def body(self, openmetrics: bool, gzipped: bool) -> bytes:
        key = (openmetrics, gzipped)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        with self._lock:
            cached = self._cache.get(key)
            if cached is None:
                raw = self._cache.get((openmetrics, False))
                if raw is None:
                    raw = self._make(openmetrics)
                # Level 1: ~4x faster than the default 6 on exposition text for a few % more bytes.
                cached = gzip.compress(raw, compresslevel=1, mtime=0) if gzipped else raw
                self._cache[key] = cached
            return cached


class Renderer:
    """Turns snapshots into Expositions. Keeps label strings cached across cycles."""

    def __init__(self, hostname_label: str = "Hostname", families: frozenset[str] | None = None) -> None:
        """``families``: publish only these (None: all)."""
        if hostname_label not in ("Hostname", "hostname"):
            raise ValueError("hostname_label must be 'Hostname' or 'hostname'")
        self.hostname_label = hostname_label
        self.families = FAMILIES if families is None else tuple(f for f in FAMILIES if f.name in families)
        self._gpu_labels: dict[tuple[GpuIdentity, PodRef | None, str, bool], str] = {}
        self._row_labels: dict[tuple[tuple[str, str], ...], str] = {}
        self._family_headers: dict[Family, tuple[bytes, bytes]] = {}
        self._build = _label_string(
            (("version", __version__), ("python_version", ".".join(map(str, sys.version_info[:3]))))
        )

    # -- labels -------------------------------------------------------------------------------
    def gpu_labels(self, sample: GpuSample, hostname: str, dcgm: bool = True) -> str:
        key = (sample.identity, sample.pod, hostname, dcgm)
        cached = self._gpu_labels.get(key)
        if cached is None:
            if len(self._gpu_labels) > 4096:  # devices come and go; never grow without bound
                self._gpu_labels.clear()
            cached = self._gpu_labels[key] = _label_string(self.gpu_label_pairs(sample, hostname, dcgm))
        return cached

    def gpu_label_pairs(self, sample: GpuSample, hostname: str, dcgm: bool = True) -> list[tuple[str, str]]:
        """dcgm-exporter's GPU labels. Own families spell ``modelName`` as ``model_name`` (the one
        label promtool rejects); every other label is identical, so the two join on UUID or gpu."""
        ident = sample.identity
        pairs = [
            ("gpu", str(ident.index)),
            ("UUID", ident.parent_uuid or ident.uuid),
            ("pci_bus_id", ident.pci_bus_id),
            ("device", ident.device),
            ("modelName" if dcgm else "model_name", ident.model),
        ]
        if ident.mig_profile is not None:
            pairs += [("GPU_I_PROFILE", ident.mig_profile), ("GPU_I_ID", str(ident.mig_instance_id))]
        pairs += [(self.hostname_label, hostname), ("DCGM_FI_DRIVER_VERSION", ident.driver_version)]
        if sample.pod is not None:
            pairs += [
                ("pod", sample.pod.pod),
                ("namespace", sample.pod.namespace),
                ("container", sample.pod.container),
            ]
        return pairs

    # -- rows ---------------------------------------------------------------------------------
    def _rows(self, fam: Family, snap: Snapshot, labels: _Labels) -> Iterator[tuple[str, float]]:
        scope = fam.scope
        pick = 0 if fam.dcgm else 1
        if scope == "gpu":
            field, scale = fam.field, fam.scale
            assert field is not None
            for g in snap.gpus:
                if g.up:
                    v = g.fields.get(field)
                    if v is not None:
                        # Round away float noise of the unit conversion (7 % is 7, not 7.000000000000001).
                        yield labels(g)[pick], v if scale == 1.0 else round(v * scale, 6)
        elif scope == "gpu_up":
            for g in snap.gpus:
                yield labels(g)[pick], 1.0 if g.up else 0.0
        elif scope == "gpu_info":
            for g in snap.gpus:
                yield f'{labels(g)[pick]},memory_total_bytes="{g.identity.memory_total_bytes}"', 1.0
        elif scope == "gpu_clock_events":
            for g in snap.gpus:
                if g.up and g.clock_event_reasons is not None:
                    base = labels(g)[pick]
                    for reason, bit in CLOCK_EVENT_REASONS:
                        yield f'{base},reason="{reason}"', 1.0 if g.clock_event_reasons & bit else 0.0
        elif scope == "collector_success":
            for c in snap.collectors:
                yield f'collector="{_escape(c.name)}"', 1.0 if c.success else 0.0
        elif scope == "collector_duration":
            for c in snap.collectors:
                yield f'collector="{_escape(c.name)}"', c.duration_seconds
        elif scope == "last_sample":
            yield "", snap.timestamp
        elif scope == "build_info":
            yield self._build, 1.0
        elif scope == "extension":
            for row in snap.rows.get(fam.name, ()):
                own = self._own_labels(row.labels)
                if row.gpu is None:
                    yield own, row.value
                else:
                    base = labels(row.gpu)[1]
                    yield (f"{base},{own}" if own else base), row.value

    def _own_labels(self, pairs: tuple[tuple[str, str], ...]) -> str:
        cached = self._row_labels.get(pairs)
        if cached is None:
            if len(self._row_labels) > 65536:
                self._row_labels.clear()
            cached = self._row_labels[pairs] = _label_string(pairs)
        return cached

    def _headers(self, fam: Family) -> tuple[bytes, bytes]:
        """(text 0.0.4 header, OpenMetrics header) of a family."""
        cached = self._family_headers.get(fam)
        if cached is None:
            name = fam.name
            text_type = "gauge" if fam.type == "info" else fam.type
            if fam.type == "info":
                om_name, om_type = name.removesuffix("_info"), "info"
            elif fam.type == "counter":
                om_name, om_type = (name[:-6], "counter") if name.endswith("_total") else (name, "unknown")
            else:
                om_name, om_type = name, fam.type
            cached = self._family_headers[fam] = (
                f"# HELP {name} {fam.help}\n# TYPE {name} {text_type}\n".encode(),
                f"# HELP {om_name} {fam.help}\n# TYPE {om_name} {om_type}\n".encode(),
            )
        return cached

    # -- documents ----------------------------------------------------------------------------
    def render(self, snap: Snapshot) -> Exposition:
        """The snapshot's exposition; each format is rendered when first asked for."""
        return Exposition(partial(self.document, snap))

    def document(self, snap: Snapshot, openmetrics: bool) -> bytes:
        """The snapshot in one format. Each family's lines are joined and encoded on their own,
        so a render holds the document about twice at most (the families' bytes and their join)."""
        per_render: dict[int, tuple[str, str]] = {}
        host = snap.hostname

        def labels(g: GpuSample) -> tuple[str, str]:
            """(dcgm-exporter's, own families') label string of a GPU, looked up once per render."""
            found = per_render.get(id(g))
            if found is None:
                found = per_render[id(g)] = (self.gpu_labels(g, host, True), self.gpu_labels(g, host, False))
            return found

        parts: list[bytes] = []
        fmt = format_value
        which = 1 if openmetrics else 0
        for fam in self.families:
            name = fam.name
            lines = [
                f"{name}{{{lab}}} {fmt(value)}\n" if lab else f"{name} {fmt(value)}\n"
                for lab, value in self._rows(fam, snap, labels)
            ]
            if fam.type == "summary":  # its _sum and _count rows are kept under those names
                for part in (f"{name}_sum", f"{name}_count"):
                    for row in snap.rows.get(part, ()):
                        own = self._own_labels(row.labels)
                        text = f"{part}{{{own}}}" if own else part
                        lines.append(f"{text} {fmt(row.value)}\n")
            if lines:
                parts.append(self._headers(fam)[which])
                parts.append("".join(lines).encode())
        if openmetrics:
            parts.append(b"# EOF\n")
        return b"".join(parts)
