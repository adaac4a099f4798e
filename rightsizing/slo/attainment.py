"""Latency SLOs: what a service declares it needs, and what a window of its histograms says about it.

An SLO is declared, never guessed (the exporter's ``slos:`` list): the workload it belongs to (the
``namespace`` and ``workload`` labels of its queue, or the queue's name), a target in seconds for
any of TTFT, inter-token latency, end-to-end latency and queue time, and the objective: the share
of requests that must meet each target (default 0.95).

Over a window, each target's **attainment** is the share of the window's requests at or under it,
from the bucket counts (``latency.share_at_or_under``: exact when the target is a bucket bound,
interpolated inside its bucket otherwise). A window with fewer than ``slo_min_requests`` requests
judges nothing ("not enough data"). A target is **missed** when its attainment is under the
objective; the **latency at the objective** is the objective's quantile (PromQL's convention), and
the workload's **latency ratio** is the worst declared target's latency at the objective over the
target (1.0: on the edge). A target is **met with room** when its latency at the objective is at
most (1 - ``slo_margin_ratio``) x the target.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from rightsizer_core.settings import setting

from ..figures import latency
from .latency import KINDS, WORDS, Histogram, ordered, quantile, share_at_or_under

QUANTILES = (0.5, 0.95, 0.99)


@dataclass(frozen=True, kw_only=True)
class SloTargets:
    """An SLO's targets and objective, without the workload (a scenario's queue declares its own)."""

    ttft_seconds: float | None = setting(None, "Target time to first token, seconds.", minimum=1e-6)
    itl_seconds: float | None = setting(None, "Target inter-token latency, seconds.", minimum=1e-6)
    e2e_seconds: float | None = setting(None, "Target end-to-end request latency, seconds.", minimum=1e-6)
    queue_seconds: float | None = setting(None, "Target time waiting in the queue, seconds.", minimum=1e-6)
    objective: float = setting(
        0.95, "Share of requests that must meet each target.", minimum=0.5, maximum=0.9999
    )

    def validate(self) -> None:
        if not self.targets:
            raise ValueError("an SLO needs a target: ttft_seconds, itl_seconds, e2e_seconds or queue_seconds")

    @property
    def targets(self) -> dict[str, float]:
        given = (self.ttft_seconds, self.itl_seconds, self.e2e_seconds, self.queue_seconds)
        return {k: v for k, v in zip(KINDS, given, strict=True) if v is not None}


@dataclass(frozen=True, kw_only=True)
class SloDeclaration(SloTargets):
    """An SLO and the workload it belongs to: its namespace and workload, or its queue's name."""

    namespace: str | None = setting(None, "Namespace of the workload (its queue's `namespace` label).")
    workload: str | None = setting(None, "Workload (its queue's `workload` label).")
    queue: str | None = setting(None, "Or the name of its queue (a `queues:` entry or a simulated queue).")

    def validate(self) -> None:
        if self.queue is None and (self.namespace is None or self.workload is None):
            raise ValueError("an SLO names its workload: namespace and workload, or queue")
        super().validate()

    def matches(self, queue: str, labels: Mapping[str, str]) -> bool:
        if self.queue is not None and self.queue != queue:
            return False
        if self.namespace is not None and labels.get("namespace") != self.namespace:
            return False
        return self.workload is None or labels.get("workload") == self.workload

    def key(self, queue: str) -> tuple[str, str]:
        """(namespace, workload) the SLO is published under (the queue's name without a workload)."""
        return (self.namespace or "", self.workload or queue)


def declaration_for(
    slos: tuple[SloDeclaration, ...] | list[SloDeclaration], queue: str, labels: Mapping[str, str]
) -> SloDeclaration | None:
    return next((d for d in slos if d.matches(queue, labels)), None)


@dataclass(frozen=True, slots=True)
class Latency:
    """One kind of latency over a window, and its target when one is declared."""

    kind: str  # ttft | itl | e2e | queue
    target: float | None  # seconds; None: measured, not declared
    objective: float
    requests: float  # observations in the window
    enough: bool  # at least slo_min_requests of them
    attainment: float | None  # share at or under the target (None: no target, or a mean only)
    exact: bool  # the target is a bucket bound
    at_objective: float | None  # the objective's quantile, seconds
    quantiles: tuple[tuple[float, float], ...]  # (q, seconds) for QUANTILES and the objective
    mean: float | None
    mean_only: bool  # the server publishes a mean, no distribution (Triton's counters)

    @property
    def judged(self) -> bool:
        return self.target is not None and self.enough and self.attainment is not None

    @property
    def missed(self) -> bool:
        return self.judged and self.attainment is not None and self.attainment < self.objective

    @property
    def ratio(self) -> float | None:
        """Latency at the objective over the target (1.0: on the edge)."""
        if not self.judged or self.at_objective is None or self.target is None:
            return None
        return self.at_objective / self.target

    def words(self) -> str:
        """'TTFT p95 0.82 s against a 0.5 s target (attainment 88 %, 4210 requests)'."""
        at = _seconds(self.at_objective)
        target = _seconds(self.target)
        made = "" if self.attainment is None else f"attainment {self.attainment:.1%}, "
        return (
            f"{WORDS[self.kind]} {percentile(self.objective)} {at} against a {target} target "
            f"({made}{self.requests:.0f} requests)"
        )

    def unjudged(self, min_requests: int, server: str | None) -> str:
        """Why a declared target is not judged."""
        if self.mean_only:
            return f"{WORDS[self.kind]}: {server or 'the server'} publishes only a mean, no distribution"
        return f"{WORDS[self.kind]}: {self.requests:.0f} requests in the window (needs {min_requests})"


def percentile(q: float) -> str:
    """0.95 -> 'p95', 0.999 -> 'p99.9'."""
    return "p" + f"{q * 100:.2f}".rstrip("0").rstrip(".")


def _seconds(x: float | None) -> str:
    return latency(x)  # '820 ms', '4.10 s', '33.4 min': never '2006500 ms'


def seconds_words(x: float | None) -> str:
    return _seconds(x)


def measure(
    kind: str,
    h: Histogram,
    target: float | None,
    objective: float,
    min_requests: int,
    requests: float | None = None,
) -> Latency:
    """``requests``: the window's requests when ``h`` observes something else (tokens); else its count."""
    n = h.count if requests is None else requests
    share = None if target is None else share_at_or_under(h, target)
    qs = sorted({*QUANTILES, objective})
    found = tuple((q, v) for q in qs if (v := quantile(h, q)) is not None)
    return Latency(
        kind, target, objective, n, n >= min_requests and n > 0,
        None if share is None else share.value, share is not None and share.exact,
        quantile(h, objective), found, h.mean, h.mean_only,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class SloEvidence:
    """A workload's latencies over a window, with its declared SLO (None: measured only)."""

    namespace: str
    workload: str
    declared: SloDeclaration | None
    latencies: tuple[Latency, ...]
    min_requests: int
    server: str | None = None
    window_seconds: float = 0.0
    # Kinds whose histogram the latest poll refused -> why (never read; the window holds what came
    # before): a declared one not judged says so.
    invalid: tuple[tuple[str, str], ...] = ()

    def with_invalid(self, refused: Mapping[str, str]) -> SloEvidence:
        return replace(self, invalid=tuple(sorted(refused.items()))) if refused else self

    def get(self, kind: str) -> Latency | None:
        return next((x for x in self.latencies if x.kind == kind), None)

    @property
    def targets(self) -> dict[str, float]:
        return {} if self.declared is None else self.declared.targets

    @property
    def judged(self) -> tuple[Latency, ...]:
        return tuple(x for x in self.latencies if x.judged)

    @property
    def missed(self) -> tuple[Latency, ...]:
        return tuple(x for x in self.judged if x.missed)

    @property
    def ratio(self) -> float | None:
        """The worst judged target's latency at the objective over the target."""
        ratios = [r for x in self.judged if (r := x.ratio) is not None]
        return max(ratios) if ratios else None

    def met_with_room(self, margin: float) -> bool:
        """Every judged target met at (1 - margin) x target or better, at least one judged, and
        every declared target judged (a target not judged is not known to have room)."""
        judged = self.judged
        if not judged or len(judged) != len(self.targets):
            return False
        return all(x.at_objective is not None and x.target is not None
                   and x.at_objective <= (1.0 - margin) * x.target for x in judged)  # fmt: skip

    def unjudged(self) -> list[str]:
        """Why each declared target is not judged (absent histograms included)."""
        out = []
        invalid = dict(self.invalid)
        for kind in self.targets:
            x = self.get(kind)
            if kind in invalid and (x is None or not x.judged):
                out.append(f"{WORDS[kind]}: invalid histogram: {invalid[kind]}")
            elif x is None:
                out.append(f"{WORDS[kind]}: {_absent(kind, self.server)}")
            elif not x.judged:
                out.append(x.unjudged(self.min_requests, self.server))
        return out


def _absent(kind: str, server: str | None) -> str:
    if server == "tgi" and kind == "ttft":
        return "TGI publishes no time-to-first-token histogram"
    if server == "triton" and kind == "itl":
        return "Triton publishes no inter-token latency"
    return "no histogram read (unknown, not fast)"


PER_REQUEST = ("e2e", "ttft", "queue")  # kinds observed once per request on every server


def evaluate(
    namespace: str,
    workload: str,
    declared: SloDeclaration | None,
    histograms: Mapping[str, Histogram],
    min_requests: int,
    server: str | None = None,
    window_seconds: float = 0.0,
) -> SloEvidence:
    targets = {} if declared is None else declared.targets
    objective = 0.95 if declared is None else declared.objective
    histograms = ordered(histograms)  # no quantile of end to end under TTFT's, nor TTFT's under queue time's
    # Inter-token latency is observed once per token (vLLM, SGLang): its requests are those of the
    # histograms observed once per request (end to end, first token, queue time: the most any counts,
    # as they differ by the requests in flight), when one is read.
    per_request = max((histograms[k].count for k in PER_REQUEST if k in histograms), default=None)
    latencies = tuple(
        measure(
            kind,
            histograms[kind],
            targets.get(kind),
            objective,
            min_requests,
            per_request if kind == "itl" else None,
        )
        for kind in KINDS
        if kind in histograms
    )
    return SloEvidence(namespace, workload, declared, latencies, min_requests, server, window_seconds)
