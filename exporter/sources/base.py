"""The protocol every GPU source implements."""

from __future__ import annotations

from typing import Protocol

from rightsizer_core.snapshot import GpuReading


class SourceUnavailable(Exception):
    """The source cannot run at all on this machine (e.g. no NVML library). The message says why
    and what to do instead; the exporter prints it and exits 2."""


class GpuSource(Protocol):
    #: Collector name in ``rightsizer_collector_success{collector=…}``.
    name: str

    async def start(self) -> None:
        """Open the source. Raise ``SourceUnavailable`` if it can never work here."""

    async def collect(self) -> GpuReading:
        """Return this cycle's reading. Must not raise for a device fault: a failing device is
        returned with ``up=False`` and the reading's status says what failed. Must never block the
        event loop; every blocking call runs in a thread with a deadline."""
        ...

    async def stop(self) -> None:
        """Release resources. Must return promptly even if a call is hung."""
