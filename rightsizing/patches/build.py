"""A patch set from the GPUs a fleet's pods held and their verdicts: the moves (``plan``) and the
files (``render``, ``readme``). ``rightsizer report --format patches`` and the exporter's
``/api/v1/patches`` both call ``build_patches``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from .plan import Context, Held, Move, plan
from .readme import readme_text
from .render import file_name, kustomization_text, patch_text


@dataclass(frozen=True)
class PatchSet:
    moves: tuple[Move, ...]
    files: dict[str, str]  # name -> text, README.md and kustomization.yaml included

    def json(self) -> dict[str, Any]:
        return {
            "moves": [move_json(m) for m in self.moves],
            "files": [{"name": n, "content": t} for n, t in self.files.items()],
        }


def move_json(m: Move) -> dict[str, Any]:
    return {
        "namespace": m.namespace,
        "workload": m.workload,
        "owner": None if m.owner is None else {
            "kind": m.owner.kind, "name": m.owner.name, "source": m.owner.source, "assumed": m.owner.assumed,
        },
        "outcome": m.outcome,
        "verdict": m.verdict,
        "change": m.change,
        "why": m.why,
        "reason": m.reason,
        "gpus": m.gpus,
        "pods": m.pods,
        "containers": list(m.containers),
        "hourly_savings_dollars": m.hourly_savings_dollars,
        "prices": list(m.prices),
        "history_seconds": round(m.history_seconds),
        "samples": m.samples,
        "notes": list(m.notes),
        "file": m.file or None,
        "replicas": None if m.replicas is None else {
            "today": m.replicas.today, "needed": m.replicas.needed, "words": m.replicas.words,
        },
        "slo": None if m.slo is None else {
            "words": m.slo.words,
            "projected": [
                {"slo": k, "seconds": round(v, 6), "target_seconds": t} for k, v, t in m.slo.projected
            ],
            "keeps": m.slo.keeps,
        },
    }  # fmt: skip


def build_patches(held: Sequence[Held], ctx: Context) -> PatchSet:
    named = [replace(m, file=file_name(m)) if m.outcome == "patch" else m for m in plan(held, ctx)]
    files = {m.file: patch_text(m, ctx) for m in named if m.outcome == "patch"}
    out = {"kustomization.yaml": kustomization_text(sorted(files), ctx), "README.md": readme_text(named, ctx)}
    out.update(sorted(files.items()))
    return PatchSet(tuple(named), out)
