"""The latency SLO of a move, when the workload declares one: its latency today and projected on
the recommended option (``slo.projection``, the engine's projection), in words and as figures."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..catalog import Catalog
from ..evidence import Evidence
from ..slo.attainment import seconds_words
from ..slo.latency import WORDS
from ..slo.projection import project
from ..slo.verdict import slo_of
from ..verdicts import Assessment

_CHANGE = re.compile(r"^(\d+) x \S+ -> (\d+) x \S+$")


@dataclass(frozen=True)
class SloView:
    words: str  # "ITL p95 8 ms against a 100 ms target (...); on L40S-48GB: ITL 30 ms (target 100 ms), ..."
    projected: tuple[tuple[str, float, float], ...]  # (kind, seconds at the objective, target)
    keeps: bool | None  # every target kept with the margin on the option; None: nothing projected


def slo_view(units: Sequence[tuple[Assessment, Evidence]], catalog: Catalog, margin: float) -> SloView | None:
    """Of the first GPU whose linked server declares an SLO; None when none does."""
    for a, ev in units:
        slo = slo_of(ev)
        if slo is None:
            continue
        today = "; ".join(x.words() for x in slo.judged)
        if not slo.judged:
            return SloView(f"declared, not judged ({'; '.join(slo.unjudged())})", (), None)
        now, then = catalog.candidate(a.current or ""), catalog.candidate(a.recommended)
        if now is None or then is None or now.key == then.key:
            return SloView(f"today {today}", (), None)
        m = _CHANGE.match(a.workload_change)
        p = project(ev, slo, now, then, int(m[2]) / int(m[1]) if m else 1.0)
        if not p.values:
            return SloView(f"today {today}; no target projected on {then.key}", (), None)
        values = ", ".join(
            f"{WORDS[k]} {seconds_words(v)} (target {seconds_words(t)})" for k, v, t in p.values
        )
        keeps = p.keeps(margin)
        verdict = "keeps every target" if keeps else "does NOT keep every target"
        return SloView(
            f"today {today}; projected on {then.key}: {values}: {verdict} with the {margin:.0%} margin",
            p.values,
            keeps,
        )
    return None
