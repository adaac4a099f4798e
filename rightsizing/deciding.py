"""Which resource decided a recommendation, for the reason to name it.

An option is chosen because every cheaper one lacks something the work needs (``lacks``: the same
tests as ``recommend.fits``, all of them rather than the first that fails). The resource that
decided is the one every cheaper option lacks (several may: memory and compute); when none rules
them all out, the reason counts what rules out how many, most first. With no cheaper option at all
the resource that projects highest on the chosen one decides (the binding resource there).

So an idle H100 holding 72 GiB at 0 % activity is kept (or moved) for its memory, not its compute;
a small model on an H100 fits an L4 because nothing cheaper holds its memory, whatever it projects
on the L4.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .catalog import Candidate, Catalog
from .recommend import Demand, burst_share, carries_bursts, gib, has_nvlink, host_link, project
from .settings import RightsizingSettings

ORDER = ("memory", "compute", "memory bandwidth", "host link", "bursts", "whole GPUs", "NVLink")


@dataclass(frozen=True, slots=True)
class Decider:
    resource: str  # one of ORDER, or the binding resource on the chosen option
    words: str  # "memory decides: no cheaper option holds 124.2 GiB"


def lacks(d: Demand, current: Candidate, c: Candidate, s: RightsizingSettings) -> tuple[str, ...]:
    """Everything ``c`` lacks for the work (empty: it fits, as ``recommend.fits`` says)."""
    out: list[str] = []
    if c.usable_memory < d.memory_bytes:
        out.append("memory")
    if c.mig is not None and (d.whole_gpus or not s.recommend_mig):
        out.append("whole GPUs")
    if d.nvlink and not has_nvlink(c):
        out.append("NVLink")
    if (
        d.bandwidth is None
        and c.memory_bandwidth_bytes_per_second < current.memory_bandwidth_bytes_per_second
    ):
        out.append("memory bandwidth")
    if d.activity is None and c.fp16_dense_tflops < current.fp16_dense_tflops:
        out.append("compute")
    if d.pcie is not None and c.key != current.key:
        link = host_link(c)
        carried = d.pcie * host_link(current) / link * d.widening if link > 0 else float("inf")
        if carried > max(s.target_activity_ratio, d.pcie * d.widening):
            out.append("host link")
    over = [resource for resource, share in _projections(d, current, c) if share > s.target_activity_ratio]
    out += over
    if not over and not carries_bursts(d, current, c):  # bursts decide only where the p95 fits
        out.append("bursts")
    return tuple(r for r in ORDER if r in out)


def _projections(d: Demand, current: Candidate, c: Candidate) -> list[tuple[str, float]]:
    out = []
    if d.activity is not None:
        tflops = c.fp16_dense_tflops
        out.append(
            (
                "compute",
                d.activity * current.fp16_dense_tflops / tflops * d.widening if tflops > 0 else float("inf"),
            )
        )
    if d.bandwidth is not None:
        theirs = c.memory_bandwidth_bytes_per_second
        ours = current.memory_bandwidth_bytes_per_second
        out.append(
            ("memory bandwidth", d.bandwidth * ours / theirs * d.widening if theirs > 0 else float("inf"))
        )
    return out


def _everywhere(
    resource: str,
    d: Demand,
    current: Candidate,
    chosen: Candidate | None,
    s: RightsizingSettings,
    which: str = "cheaper option",
    near: tuple[float, ...] = (),
) -> str:
    """``near``: the usable memory of the options the clause is about (the need is shown to the
    precision that tells it from theirs)."""
    target = f"{s.target_activity_ratio:.0%}"
    if resource == "memory":
        return f"no {which} holds {_need(d, near)}"
    if resource in ("compute", "memory bandwidth"):
        if (d.activity if resource == "compute" else d.bandwidth) is None:
            return f"no {which} has today's {resource} (it is not measured)"
        return f"every {which} would run its {resource} above {target}"
    if resource == "host link":
        return f"every {which}'s host link is too narrow for its transfers"
    if resource == "bursts":
        here = f" ({burst_share(d, current, chosen):.0%} here)" if chosen is not None else ""
        return f"its bursts (p99) would saturate every {which}{here}"
    if resource == "whole GPUs":
        return f"it needs whole GPUs, and every {which} is a MIG slice"
    return f"it moves data over NVLink, and no {which} has NVLink"


def nothing_carries(
    d: Demand, current: Candidate, catalog: Catalog, s: RightsizingSettings, needed: str
) -> Decider:
    """What no catalog option has, when unmet demand needs more than any of them carries (an
    upgrade with nothing to recommend): the resource every other option lacks, else the one that
    rules out most of them; ``needed`` (what the unmet demand needs more of) when none lacks any."""
    others = [c for c in catalog.candidates() if c.key != current.key]
    every = [lacks(d, current, c, s) for c in others]
    fails = [f for f in every if f]
    counts = Counter(r for f in fails for r in f)
    everywhere = [r for r in ORDER if fails and counts[r] == len(fails)]
    if everywhere:
        near = tuple(c.usable_memory for c, f in zip(others, every, strict=True) if f)
        words = "; ".join(_everywhere(r, d, current, None, s, "catalog option", near) for r in everywhere)
        return Decider(everywhere[0], f"{_names(everywhere)} {_verb(everywhere)}: {words}")
    if not counts:  # each option carries a share: the whole needs more GPUs than today's
        return Decider(needed, f"{needed} decides: no catalog option carries the whole on as many GPUs")
    ranked = sorted(counts, key=lambda r: (-counts[r], ORDER.index(r)))
    also = "".join(f", {r} {counts[r]}" for r in ranked[1:])
    return Decider(
        ranked[0],
        f"{ranked[0]} rules out most options ({counts[ranked[0]]} of {len(fails)}{also})"
        f"{_holders(d, others, every, s)}",
    )


# Percentiles move in 1 % bins, so a GPU's demand repeats from one scoring to the next: the answer
# is kept per (demand, options, catalog, settings), the catalog and settings by identity.
_KEPT: dict[tuple[object, ...], tuple[Catalog, RightsizingSettings, Decider]] = {}
KEEP = 4096


def deciding(
    d: Demand,
    current: Candidate,
    chosen: Candidate,
    catalog: Catalog,
    s: RightsizingSettings,
    upgrade: bool = False,
) -> Decider:
    """What decided ``chosen`` (today's option for a rightsized GPU): what the cheaper options lack.
    An ``upgrade`` leaves today's option out of them (it is what falls short)."""
    key = (d, current.key, chosen.key, upgrade, id(catalog), id(s))
    kept = _KEPT.get(key)
    if kept is not None and kept[0] is catalog and kept[1] is s:
        return kept[2]
    found = _deciding(d, current, chosen, catalog, s, upgrade)
    if len(_KEPT) >= KEEP:
        _KEPT.clear()
    _KEPT[key] = (catalog, s, found)
    return found


def _deciding(
    d: Demand,
    current: Candidate,
    chosen: Candidate,
    catalog: Catalog,
    s: RightsizingSettings,
    upgrade: bool,
) -> Decider:
    cheaper = [
        c
        for c in catalog.candidates()
        if c.hourly_price_dollars < chosen.hourly_price_dollars - 1e-9
        and not (upgrade and c.key == current.key)
    ]
    every = [lacks(d, current, c, s) for c in cheaper]
    fails = [f for f in every if f]
    # A cheaper option that fits was passed over for saving too little: "no cheaper option" would be
    # false of it, so it is named.
    passed = [c.key for c, f in zip(cheaper, every, strict=True) if not f and c.key != current.key]
    but = f" (but {_names(passed)}, which would save under {s.min_savings_ratio:.0%})" if passed else ""
    if not fails:
        share, binding = project(d, current, chosen)
        if binding == "memory":  # nothing measured: it has no less of anything
            return Decider("memory", f"memory decides: {chosen.key} holds {gib(d.memory_bytes)}")
        return Decider(binding, f"{binding} decides at {share:.0%} projected on {chosen.key}")
    counts = Counter(r for f in fails for r in f)
    everywhere = [r for r in ORDER if counts[r] == len(fails)]
    if everywhere:
        which = "other cheaper option" if passed else "cheaper option"
        near = tuple(c.usable_memory for c, f in zip(cheaper, every, strict=True) if f)
        words = "; ".join(_everywhere(r, d, current, chosen, s, which, near) for r in everywhere)
        return Decider(everywhere[0], f"{_names(everywhere)} {_verb(everywhere)}: {words}{but}")
    ranked = sorted(counts, key=lambda r: (-counts[r], ORDER.index(r)))
    others = "".join(f", {r} {counts[r]}" for r in ranked[1:])
    return Decider(
        ranked[0],
        f"{ranked[0]} rules out most cheaper options ({counts[ranked[0]]} of {len(fails)}{others})"
        f"{but}{_holders(d, cheaper, every, s)}",
    )


def _holders(
    d: Demand, cheaper: list[Candidate], every: list[tuple[str, ...]], s: RightsizingSettings
) -> str:
    """The cheaper options that hold the memory yet lost, each with what it lacks (a reader who
    knows one of them holds it asks why it was not taken): '; L4-24GB holds 20.7 GiB but ...'."""
    by_lack: dict[tuple[str, ...], list[str]] = {}
    for c, lack in zip(cheaper, every, strict=True):
        if lack and "memory" not in lack:
            by_lack.setdefault(lack, []).append(c.key)
    parts = []
    for lack, keys in by_lack.items():
        many = len(keys) > 1
        names = _names(keys[:2]) if len(keys) <= 2 else f"{', '.join(keys[:2])} and {len(keys) - 2} more"
        why = " and ".join(_lacking(r, d, s, many) for r in lack)
        parts.append(f"{names} {'hold' if many else 'holds'} {gib(d.memory_bytes)} but {why}")
    return "; " + "; ".join(parts) if parts else ""


def _lacking(resource: str, d: Demand, s: RightsizingSettings, many: bool) -> str:
    """Why an option that holds the memory lost on ``resource`` (``many``: said of several)."""
    target = f"{s.target_activity_ratio:.0%}"
    if resource in ("compute", "memory bandwidth"):
        if (d.activity if resource == "compute" else d.bandwidth) is None:
            return f"{'have' if many else 'has'} less {resource} than today's (it is not measured)"
        return f"would run its {resource} above {target}"
    if resource == "host link":
        return f"{'their host links are' if many else 'its host link is'} too narrow for its transfers"
    if resource == "bursts":
        return f"its bursts (p99) would saturate {'them' if many else 'it'}"
    if resource == "whole GPUs":
        slices = "are MIG slices" if many else "is a MIG slice"
        why = "the work needs whole GPUs" if d.whole_gpus else "recommend_mig is off"
        return f"{slices}, and {why}"
    return f"{'have' if many else 'has'} no NVLink, which the work uses"


def _need(d: Demand, near: tuple[float, ...]) -> str:
    """The memory need in GiB to 0.1, or to 0.01 where an option short of it shows the same 0.1
    (19.53 GiB needed, 19.50 GiB held: both read 19.5)."""
    tenths = round(d.memory_bytes / 2**30, 1)
    if any(round(m / 2**30, 1) >= tenths for m in near if m < d.memory_bytes):
        return f"{d.memory_bytes / 2**30:.2f} GiB"
    return gib(d.memory_bytes)


def _names(resources: list[str]) -> str:
    return resources[0] if len(resources) == 1 else f"{', '.join(resources[:-1])} and {resources[-1]}"


def _verb(resources: list[str]) -> str:
    return "decide" if len(resources) > 1 or resources[0] in ("bursts", "whole GPUs") else "decides"
