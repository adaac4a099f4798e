"""The node's dcgm-exporter as a source: read on its own cadence, merged into each cycle's samples.

A GPU's (or MIG instance's) profiling ratios are taken from the page only where its NVML sample
has none: GPM, where it works (Hopper and newer), stays first. A MIG instance is matched by its
parent GPU's UUID and its GPU instance id, a GPU by its UUID; lines of GPUs this node does not
have are ignored. The source is down (``rightsizer_dcgm_exporter_up`` 0, its collector failing)
when the latest read failed or the last good one is older than ``max_age_seconds``; then no value
of it is used: unknown, never 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Mapping

from rightsizer_core.logs import event
from rightsizer_core.snapshot import CollectorStatus, GpuReading, GpuSample, Row

from ...sampler import Contribution
from ..queues.base import QueueSourceError, shorten
from ..queues.http_client import HttpGetter
from ..queues.settings import QueueSettings
from .page import Entity, Page, PageScan
from .settings import DcgmExporterSettings

log = logging.getLogger("rightsizer.dcgm")
NAME = "dcgm_exporter"
ACCEPT = "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"


class PageReader:
    """GETs the page over one kept-alive connection and reads it as it arrives."""

    def __init__(self, cfg: DcgmExporterSettings) -> None:
        http = QueueSettings(
            name=NAME,
            kind="prometheus",
            url=cfg.url,
            bearer_token_file=cfg.bearer_token_file,
            tls_ca_file=cfg.tls_ca_file,
            tls_insecure_skip_verify=cfg.tls_insecure_skip_verify,
        )
        self.cfg = cfg
        self.http = HttpGetter(http, ACCEPT, cfg.max_body_bytes)
        self._scan: PageScan | None = None

    def _begin(self, content_type: str) -> None:
        if content_type in ("text/html", "application/json"):
            raise QueueSourceError(f"answer is {content_type}, not a Prometheus exposition")
        om = content_type == "application/openmetrics-text"
        self._scan = PageScan(om, self.cfg.max_series, self.cfg.max_series_bytes)

    def _feed(self, chunk: bytes) -> None:
        assert self._scan is not None
        self._scan.feed(chunk)

    async def read(self) -> Page:
        self._scan = None
        try:
            await self.http.get(sink=(self._begin, self._feed))
            if self._scan is None:
                raise QueueSourceError("answer has no body")
            return self._scan.finish()
        finally:
            self._scan = None

    def close(self) -> None:
        self.http.close()


@dataclasses.dataclass
class SourceState:
    page: Page | None = None  # the last page read well
    read_at: float | None = None  # its monotonic time
    success_at: float | None = None  # its Unix time
    error: str | None = "not read yet"  # the latest read's fault; None when it succeeded
    duration: float = 0.0  # seconds the latest read took


class DcgmExporterExtension:
    name = NAME

    def __init__(self, cfg: DcgmExporterSettings, reader: PageReader | None = None) -> None:
        self.cfg = cfg
        self.reader = reader or PageReader(cfg)
        self.state = SourceState()
        self.polls = 0
        self._rejected: str | None = None  # the first value left out at the latest read (logged once)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.poll()  # the first cycle finds a page when the exporter answers quickly
        self._task = asyncio.create_task(self._run(), name="dcgm-exporter")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.reader.close()

    async def _run(self) -> None:
        next_at = time.monotonic() + self.cfg.interval_seconds
        while True:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            try:
                await self.poll()
            except Exception:  # a bug must not end the polls: the source goes stale, then down
                log.exception("dcgm-exporter read failed unexpectedly")
            next_at = max(next_at + self.cfg.interval_seconds, time.monotonic())

    async def poll(self) -> None:
        started = time.monotonic()
        was = self.state.error
        error: str | None
        try:
            page = await asyncio.wait_for(self.reader.read(), self.cfg.timeout_seconds)
        except QueueSourceError as exc:
            error = str(exc)
        except TimeoutError:
            error = f"no answer within {self.cfg.timeout_seconds:g} s"
        except OSError as exc:
            error = shorten(f"connection failed: {exc.strerror or exc}", 200)
        else:
            error = None
            self.state.page, self.state.read_at, self.state.success_at = page, time.monotonic(), time.time()
            if page.rejected and page.rejected[0] != self._rejected:  # once per distinct fault
                event(
                    log, logging.WARNING, "dcgm-exporter values out of range left out", first=page.rejected[0]
                )
            self._rejected = page.rejected[0] if page.rejected else None
        if error is not None:
            self.reader.http.close()  # a failed or cut-short read never reuses its connection
        self.polls += 1
        self.state.error, self.state.duration = error, time.monotonic() - started
        if error is not None and error != was:  # once per distinct fault, not once per read
            event(log, logging.WARNING, "dcgm-exporter down", url=self.cfg.url, reason=error)
        elif error is None and was is not None:
            event(log, logging.INFO, "dcgm-exporter read", url=self.cfg.url)

    def usable(self) -> Page | None:
        """The page to use this cycle: None while the source is down."""
        s = self.state
        if s.error is not None or s.page is None or s.read_at is None:
            return None
        if time.monotonic() - s.read_at > self.cfg.max_age_seconds:
            return None
        return s.page

    def contribute(self, reading: GpuReading, gpus: tuple[GpuSample, ...]) -> Contribution:
        page = self.usable()
        s = self.state
        error = s.error
        if page is None and error is None:
            error = f"last read more than {self.cfg.max_age_seconds:g} s ago"
        merged, matched = (gpus, []) if page is None else merge(gpus, page.values)
        rows: dict[str, tuple[Row, ...]] = {
            "rightsizer_dcgm_exporter_up": (Row(0.0 if page is None else 1.0),),
            "rightsizer_dcgm_exporter_gpus": (Row(float(len(matched))),),
        }
        if s.success_at is not None:
            rows["rightsizer_dcgm_exporter_last_success_timestamp_seconds"] = (Row(s.success_at),)
        api = {
            "url": self.cfg.url,
            "up": page is not None,
            "error": error,
            "series": page.series if page is not None else None,
            "gpus": matched,
            "rejected": list(page.rejected) if page is not None else [],
        }
        status = CollectorStatus(NAME, page is not None, s.duration, error)
        return Contribution(rows=rows, api={"dcgm_exporter": api}, collectors=(status,), gpus=merged)


def entity_of(sample: GpuSample) -> Entity:
    ident = sample.identity
    if ident.mig_instance_id is not None and ident.parent_uuid:
        return ident.parent_uuid, str(ident.mig_instance_id)
    return ident.uuid, None


def merge(
    gpus: tuple[GpuSample, ...], values: Mapping[Entity, Mapping[str, float]]
) -> tuple[tuple[GpuSample, ...], list[dict[str, object]]]:
    """``gpus`` with the page's fields added where their own sample has none; what each got."""
    out: list[GpuSample] = []
    matched: list[dict[str, object]] = []
    for sample in gpus:
        found = values.get(entity_of(sample)) if sample.up else None
        if not found:
            out.append(sample)
            continue
        added = {k: v for k, v in found.items() if k not in sample.fields}
        if added:
            fields = {**sample.fields, **added}
            sample = dataclasses.replace(sample, fields=fields, unsupported=sample.unsupported - added.keys())
        matched.append({"uuid": sample.identity.uuid, "fields": sorted(added)})
        out.append(sample)
    return tuple(out), matched
