"""Declared SLOs that match no queue.

An SLO belongs to the workload behind a queue: its ``namespace`` and ``workload`` are matched
against the queues' labels (or its ``queue`` against their names). The queues an exporter reads are
all known at start: the configured ``queues:`` with their static labels, and the simulated fleet's.
An SLO that none of them matches is never judged, and nothing else would say so (the workload has
no SLO series, the adapter answers 404): the exporter says it at start (one warning line per SLO),
``--check-config`` says it, and the status page shows it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rightsizing.slo.attainment import SloDeclaration

SHOWN = 10  # queues named in a line; the rest are counted


@dataclass(frozen=True, slots=True)
class Unmatched:
    """An SLO that no queue matches, and the workloads that exist instead."""

    slo: str  # "llm/chat", or "queue 'vllm-a'"
    workloads: str  # "llm/chat-8b (queue vllm-0), batch (queue redis-jobs)", or "none: no queue"

    def line(self) -> str:
        return f"the SLO for {self.slo} matches no queue, so it is never judged; queues: {self.workloads}"

    def json(self) -> dict[str, str]:
        return {"slo": self.slo, "queues": self.workloads, "message": self.line()}


def known_queues(configured: Iterable[Any], source: object = None) -> list[tuple[str, dict[str, str]]]:
    """(name, labels) of every queue the exporter will read: ``queues:`` entries (their static
    labels) and the simulated fleet's queues."""
    out = [(str(q.name), dict(q.labels)) for q in configured]
    simulated = getattr(source, "queue_entries", None)
    if callable(simulated):
        out += [(str(name), dict(labels)) for name, labels in simulated()]
    return out


def slo_name(d: SloDeclaration) -> str:
    if d.workload is not None:
        return f"{d.namespace}/{d.workload}" if d.namespace else d.workload
    return f"queue {d.queue!r}"


def _workload(name: str, labels: Mapping[str, str]) -> str:
    ns, workload = labels.get("namespace"), labels.get("workload")
    if workload is None:
        return f"queue {name} (no workload label)"
    return f"{ns + '/' if ns else ''}{workload} (queue {name})"


def queues_words(queues: Sequence[tuple[str, Mapping[str, str]]]) -> str:
    if not queues:
        return "none (no queue is configured or simulated)"
    shown = sorted({_workload(n, labels) for n, labels in queues})
    more = f", and {len(shown) - SHOWN} more" if len(shown) > SHOWN else ""
    return ", ".join(shown[:SHOWN]) + more


def unmatched(
    slos: Iterable[SloDeclaration], queues: Sequence[tuple[str, Mapping[str, str]]]
) -> list[Unmatched]:
    """The SLOs that no queue matches, in declaration order."""
    words = queues_words(queues)
    return [
        Unmatched(slo_name(d), words)
        for d in slos
        if not any(d.matches(name, labels) for name, labels in queues)
    ]
