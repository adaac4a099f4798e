"""Moves: what the verdicts of the GPUs a workload holds ask of the object that owns its pods.

The GPUs (and MIG instances) are grouped by owner (``owners``). A group gets one move:

- ``patch``: every pod's GPUs agree on a move to another catalog option, each on enough history,
  priced by list or configured prices (estimates only with ``include_estimated_prices``), all of
  the pod's containers land on one node type, and the owner is a kind with a known pod template;
- ``idle``: every GPU idle: scale to zero or delete (no patch);
- ``replicas``: no bigger GPU carries the work ("add replicas"): how many, from the measured arrival
  rate or the SLO (``replicas``), and the autoscalers that keep at least that many (no patch);
- ``manual``: a multi-GPU move that changes the GPU count (the server's parallelism must change
  too), or an owner of a kind this tool does not patch: the change is spelled out instead;
- ``refused``: anything else a patch would have to guess, with the reason.

Groups where every GPU is rightsized (or has no catalog move) get no move.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rightsizer_core.workloads import workload_of

from ..catalog import Candidate, Catalog
from ..evidence import Evidence
from ..verdicts import Assessment, duration, price_source
from . import change, selection
from .change import Body
from .latency import SloView, slo_view
from .manifests import Manifests
from .names import GPU_RESOURCE, PRODUCT_LABEL, TEMPLATES, Placement, name_problem, placement
from .owners import Owner, OwnerSeries, resolve
from .replicas import Replicas, adds_replicas, autoscalers, count
from .settings import PatchSettings

OUTCOMES = ("patch", "idle", "replicas", "manual", "refused")
_CHANGE = re.compile(r"^(\d+) x (\S+) -> (\d+) x (\S+)$")


@dataclass(frozen=True)
class Held:
    """One GPU or MIG instance a pod's container held over the window, and its judgement."""

    namespace: str
    pod: str
    container: str
    gpu: str  # its UUID
    assessment: Assessment
    evidence: Evidence


@dataclass(frozen=True)
class Context:
    at: float  # end of the window judged (Unix seconds)
    window_seconds: float
    catalog: Catalog
    settings: PatchSettings
    generator: str  # "rightsizer report", "rightsizer-exporter on node-7"
    owners: OwnerSeries | None = None
    owners_read: str = ""  # where owners come from, in words
    manifests: Manifests | None = None
    slo_margin_ratio: float = 0.1  # rightsizing.slo_margin_ratio: the projection keeps a target under it


@dataclass(frozen=True)
class Move:
    namespace: str
    workload: str  # the owner's name, else the pods' workload name
    owner: Owner | None
    outcome: str  # one of OUTCOMES
    verdict: str
    gpus: int
    pods: int
    change: str  # "H100-SXM-80GB -> L4-24GB", "release", "2 x H100-SXM-80GB -> 1 x H200-SXM-141GB"
    why: str  # patch: what it changes; otherwise why there is no patch, or what to do by hand
    reason: str  # the engine's reason (the first GPU's)
    hourly_savings_dollars: float | None
    prices: tuple[str, ...]  # each option's price and its source
    history_seconds: float  # the shortest of its GPUs'
    samples: int  # the fewest
    containers: tuple[str, ...]
    queues: tuple[str, ...] = ()  # queues linked to its GPUs
    pod_workload: str = ""  # the pods' workload name (the adapter's ``workload`` label)
    gpus_per_pod: int = 1
    body: Body | None = None
    file: str = ""
    slo: SloView | None = None  # the declared latency SLO, today and projected on the option
    notes: tuple[str, ...] = field(default=())
    replicas: Replicas | None = None  # outcome "replicas": today, needed, how
    autoscalers: tuple[dict[str, Any], ...] = ()  # an HPA and a KEDA ScaledObject keeping that many


def _moves(a: Assessment) -> bool:
    return (
        a.verdict in ("overprovisioned", "underprovisioned")
        and a.recommended not in ("none", "release", "")
        and a.recommended != a.current
    )


def plan(held: Sequence[Held], ctx: Context) -> list[Move]:
    """One move per owner whose GPUs ask for one; patch moves first, then by money."""
    exists = ctx.manifests.exists if ctx.manifests is not None else None
    groups: dict[tuple[str, ...], list[Held]] = {}
    owner_of: dict[tuple[str, ...], Owner | str] = {}
    for h in held:
        if not h.pod:
            continue  # held by no pod: no object to change
        o = resolve(h.namespace, h.pod, ctx.owners, exists)
        key = (
            (h.namespace, o.kind, o.name)
            if isinstance(o, Owner)
            else (h.namespace, "", workload_of(h.pod), o)
        )
        groups.setdefault(key, []).append(h)
        owner_of[key] = o
    moves = [m for k, units in groups.items() if (m := decide(units, owner_of[k], ctx)) is not None]
    moves.sort(
        key=lambda m: (OUTCOMES.index(m.outcome), -(m.hourly_savings_dollars or 0.0), m.namespace, m.workload)
    )
    return moves


def _price(c: Candidate) -> str:
    return f"{c.key}: ${c.hourly_price_dollars:.2f}/h, {price_source(c)} ({c.price_source})"


def decide(units: list[Held], owner: Owner | str, ctx: Context) -> Move | None:
    s, catalog = ctx.settings, ctx.catalog
    moving = [u for u in units if _moves(u.assessment)]
    idle = [u for u in units if u.assessment.verdict == "idle"]
    adding = [] if moving or idle else [u for u in units if adds_replicas(
        u.assessment.verdict, u.assessment.recommended, u.assessment.reason)]  # fmt: skip
    if not moving and not idle and not adding:
        return None
    first = (moving or idle or adding)[0]
    pods = Counter(u.pod for u in units)
    pairs = sorted({f"{u.assessment.current} -> {u.assessment.recommended}" for u in moving})
    savings = [u.assessment.hourly_savings_dollars for u in moving or idle]
    candidates = {c.key: c for u in moving for k in (u.assessment.current, u.assessment.recommended)
                  if k and (c := catalog.candidate(k)) is not None}  # fmt: skip
    move = Move(
        namespace=first.namespace,
        workload=owner.name if isinstance(owner, Owner) else workload_of(first.pod),
        owner=owner if isinstance(owner, Owner) else None,
        outcome="refused",
        verdict=", ".join(f"{n} {v}" for v, n in Counter(u.assessment.verdict for u in units).most_common()),
        gpus=len(units),
        pods=len(pods),
        change="add replicas" if adding else "release" if not moving else "; ".join(pairs),
        why="",
        reason=first.assessment.reason,
        hourly_savings_dollars=None
        if any(x is None for x in savings)
        else round(sum(x or 0.0 for x in savings), 4),
        prices=tuple(_price(c) for c in candidates.values()),
        history_seconds=min(u.evidence.history_seconds for u in units),
        samples=min(u.evidence.samples for u in units),
        containers=tuple(sorted({u.container for u in units})),
        queues=tuple(sorted({q.name for u in units for q in u.evidence.queues})),
        pod_workload=workload_of(first.pod),
        gpus_per_pod=max(pods.values()),
        slo=slo_view([(u.assessment, u.evidence) for u in moving], catalog, ctx.slo_margin_ratio),
    )
    refused = [u for u in units if u.assessment.verdict == "insufficient_data"]
    if refused:
        return replace(
            move, why=f"{len(refused)} of its {len(units)} GPUs have too little data for a verdict"
        )
    if idle and len(idle) < len(units):
        return replace(move, why=f"its pods disagree: {len(idle)} of {len(units)} GPUs idle, the others not")
    if isinstance(owner, str):
        return replace(move, outcome="idle" if idle else "refused", why=f"no owner: {owner}")
    problems = [
        name_problem("namespace", owner.namespace),
        name_problem(f"{owner.kind} name", owner.name, True),
    ]
    problems += [name_problem("container name", c) for c in move.containers]
    if problem := next((p for p in problems if p), None):
        return replace(move, why=problem)
    if idle:
        return replace(move, outcome="idle", why="every GPU stayed idle: scale to zero or delete")
    if adding:
        return _scale_out(units, owner, move, ctx)
    need = max(s.min_history_seconds, s.min_window_coverage_ratio * ctx.window_seconds)
    if (short := min(u.evidence.history_seconds for u in moving)) < need:
        return replace(move, why=(
            f"history of {duration(short)} is short of the {duration(need)} a patch needs "
            f"(patches.min_history_seconds, patches.min_window_coverage_ratio of the "
            f"{duration(ctx.window_seconds)} window)"))  # fmt: skip
    estimated = sorted(k for k, c in candidates.items() if price_source(c) == "estimate")
    if estimated and not s.include_estimated_prices:
        return replace(move, why=(
            f"{', '.join(estimated)}: the price is an estimate, not a list price (patch it with "
            "--include-estimated-prices or patches.include_estimated_prices, or set your price in "
            "catalog.prices)"))  # fmt: skip
    return _targeted(units, moving, owner, move, ctx)


def _scale_out(units: list[Held], owner: Owner, move: Move, ctx: Context) -> Move:
    pods: dict[str, list[Evidence]] = {}
    for u in units:
        pods.setdefault(u.pod, []).append(u.evidence)
    r = count(pods, ctx.slo_margin_ratio)
    slo = any(q.slo is not None and q.slo.declared is not None for u in units for q in u.evidence.queues)
    scale = autoscalers(owner, r, move.queues, move.pod_workload, slo, ctx.slo_margin_ratio)
    return replace(move, outcome="replicas", why=r.words, replicas=r, autoscalers=tuple(scale))


def _resized(
    held: list[change.Rename], today: int, then: int, owner: Owner, ctx: Context
) -> list[change.Rename]:
    """A tensor-parallel group that one pod's one container holds whole, resized: patched when its
    manifest is read (the server's flag is checked there); [] when not this case."""
    if ctx.manifests is None or owner.kind not in TEMPLATES or len(held) != 1 or held[0].count != today:
        return []
    if held[0].old != GPU_RESOURCE or held[0].new != GPU_RESOURCE:
        return []
    return [replace(held[0], to_count=then)]


def _targeted(units: list[Held], moving: list[Held], owner: Owner, move: Move, ctx: Context) -> Move:
    """Where each container goes: one node type for the pod, the resource each asks for."""
    changes = {u.assessment.workload_change for u in moving if u.assessment.workload_change}
    if len(changes) > 1:
        return replace(move, why=f"its GPUs disagree on the multi-GPU move ({'; '.join(sorted(changes))})")
    targets: dict[str, set[tuple[str, str]]] = {}
    for u in units:
        a = u.assessment
        if a.current is None:
            return replace(move, why=f"{u.gpu}: its GPU model is not in the catalog")
        targets.setdefault(u.container, set()).add((a.current, a.recommended if u in moving else a.current))
    if disagree := {c: t for c, t in targets.items() if len(t) > 1}:
        c, t = next(iter(disagree.items()))
        return replace(
            move,
            why=f"its replicas disagree for container {c}: {', '.join(' -> '.join(p) for p in sorted(t))}",
        )
    counts = {
        c: {n for (pod, cc), n in Counter((u.pod, u.container) for u in units).items() if cc == c}
        for c in targets
    }
    if odd := next((c for c, n in counts.items() if len(n) > 1), None):
        return replace(move, why=f"its pods hold different numbers of GPUs in container {odd}")
    where: dict[str, tuple[Placement, Placement]] = {}
    gpus_of: dict[str, tuple[Candidate, Candidate]] = {}
    for c, ((cur, rec),) in ((c, tuple(t)) for c, t in targets.items()):
        now, then = ctx.catalog.candidate(cur), ctx.catalog.candidate(rec)
        if now is None or then is None:
            return replace(move, why=f"{cur if now is None else rec} is not in the catalog")
        p, q = placement(now, ctx.settings.mig_strategy), placement(then, ctx.settings.mig_strategy)
        if isinstance(p, str) or isinstance(q, str):
            return replace(move, why=p if isinstance(p, str) else str(q))
        where[c] = (p, q)
        gpus_of[c] = (now, then)
    products = sorted({q.product for _, q in where.values()})
    if len(products) > 1:
        return replace(
            move,
            why=f"its containers would need nodes of different types ({', '.join(products)}), "
            "and one pod lands on one node",
        )
    product = products[0]
    held = [change.Rename(c, max(counts[c]), p.resource, q.resource) for c, (p, q) in sorted(where.items())]
    renames = [r for r in held if r.old != r.new]
    words = [f"nodes labelled {PRODUCT_LABEL}={product}"]
    words += [f"container {r.container}: {r.old} -> {r.new}" for r in renames] or ["the GPU count is kept"]
    if changes:
        m = _CHANGE.match(next(iter(changes)))
        if m is not None and m[1] != m[3] and (resized := _resized(held, int(m[1]), int(m[3]), owner, ctx)):
            held = resized
            words[1:] = [f"the GPU count per pod {m[1]} -> {m[3]}, the server's tensor-parallel size with it"]
        elif m is None or m[1] != m[3]:
            return replace(move, outcome="manual", change=next(iter(changes)), why=(
                f"the GPU count changes ({next(iter(changes))}), so the server's parallelism must change "
                "with it (vLLM --tensor-parallel-size, a trainer's world size): no automatic patch. By hand: "
                f"select {words[0]} and give the workload {m[3] if m else 'the new number of'} GPUs in all, "
                f"{m[1] if m else 'as many as'} today"))  # fmt: skip
        move = replace(move, change=next(iter(changes)))
    if owner.kind not in TEMPLATES:
        return replace(move, outcome="manual", why=(
            f"{owner.kind} is not a kind this tool patches (its pod template's place is not known here): "
            f"by hand, in its pod template select {'; '.join(words)}"))  # fmt: skip
    (now, then), gpus = next(iter(gpus_of.values())), sum(r.to_count or r.count for r in held)
    mig = any(x.mig is not None for pair in gpus_of.values() for x in pair)
    needs = [u.assessment.memory_need_bytes for u in moving if u.assessment.memory_need_bytes]
    target = selection.Move(now.gpu.key, then.gpu.key, product, mig, gpus, None, then.usable_memory,
                            now.usable_memory, max(needs) if needs else None)  # fmt: skip
    body = change.build(owner, target, held, ctx.manifests)
    if isinstance(body, str):
        return replace(move, why=body)
    if isinstance(body, change.ByHand):
        renamed = f"; and {'; '.join(words[1:])}" if renames else ""
        return replace(move, outcome="manual", why=body.why[:1].upper() + body.why[1:] + renamed)
    words[0] = "nodes labelled " + ", ".join(body.labels) if body.labels else "the node selection is kept"
    notes = list(body.notes)
    if owner.kind in ("Job", "Pod"):
        notes.append(
            f"a {owner.kind}'s pod template cannot change in place: the change takes effect when it is "
            "created again"
        )
    return replace(move, outcome="patch", why="; ".join(words), body=body, notes=tuple(notes))
