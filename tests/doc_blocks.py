"""The fenced code blocks of README.md and docs/*.md, and what kind of example each one is.

A block's kind comes from an HTML comment on the line before it (``<!-- example: KIND -->``), or
else from its content: the info string (``yaml``, ``sh``, ``text``) and, for YAML, its top-level
keys. Kinds:

- ``output`` / ``runs``: executable examples (tests/test_readme_examples.py runs them);
- ``worked-example``: a verdict block of docs/rightsizing.md (tests/test_readme_rightsizing.py);
- ``scenario``, ``scenario-gpus``: a scenario file, or a fragment of its ``gpus:`` list;
- ``exporter-config``, ``adapter-config``: a file for ``--config`` of either program (or a part);
- ``hpa-spec``: the ``metrics:`` of a HorizontalPodAutoscaler's spec;
- ``scaledobject-spec``: part of a KEDA ScaledObject's spec (``triggers:``, ``fallback:``);
- ``helm-values``, ``kustomization``: a values file of the Helm chart, a user's kustomization of
  deploy/ (rendered by tests/test_helm_docs.py);
- ``shell``: commands, checked against the programs' ``--help`` and the repository's files;
- ``patch-manifest``, ``patch-output``: the patches examples of docs/rightsizing.md, a fixture
  manifest and the patch ``rightsizer report --format patches`` writes for it; the per-cloud ones
  name their file after a comma (``patch-output, gke_deployment_chat.yaml``)
  (tests/test_patches_docs.py);
- ``model-label-promql``: the queries of docs/metrics.md joining DCGM's families with ours, run
  on a real Prometheus by tests/test_model_label.py;
- ``not-checked (REASON)``: left alone, with the reason in the marker (kept rare).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from servers import ROOT

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_MARKER = re.compile(r"^\s*<!-- example: (.+?) -->\s*$")
SCALED_OBJECT_SPEC = {
    "triggers",
    "fallback",
    "advanced",
    "pollingInterval",
    "cooldownPeriod",
    "minReplicaCount",
    "maxReplicaCount",
    "idleReplicaCount",
    "initialCooldownPeriod",
}
_FENCE = re.compile(r"^(\s*)(`{3,})\s*([\w-]*)\s*$")


@dataclass(frozen=True)
class Block:
    document: str  # relative to the repository root
    line: int  # of the opening fence
    info: str
    body: str  # dedented by the fence's indentation
    marker: str | None

    @property
    def where(self) -> str:
        return f"{self.document}:{self.line}"


def blocks(path: Path) -> list[Block]:
    found: list[Block] = []
    lines = path.read_text().splitlines()
    number = 0
    while number < len(lines):
        opening = _FENCE.match(lines[number])
        if not opening:
            number += 1
            continue
        indent, fence, info = opening.groups()
        end = number + 1
        while end < len(lines) and lines[end].strip() != fence:
            end += 1
        body = "".join(line.removeprefix(indent) + "\n" for line in lines[number + 1 : end])
        previous = next((lines[i] for i in range(number - 1, -1, -1) if lines[i].strip()), "")
        marker = _MARKER.match(previous)
        relative = path.relative_to(ROOT).as_posix()
        found.append(Block(relative, number + 1, info, body, marker[1] if marker else None))
        number = end + 1
    return found


def all_blocks() -> list[Block]:
    return [b for path in DOCUMENTS for b in blocks(path)]


def kind(block: Block) -> str:
    """The block's kind (see the module's docstring); ``unknown`` when neither marker nor content
    says, which the tests refuse."""
    if block.marker:  # "runs, prints TEXT" is of kind runs; a not-checked reason may hold commas
        return block.marker if block.marker.startswith("not-checked") else block.marker.split(",")[0].strip()
    if block.info == "text" and block.body.startswith("verdict: "):
        return "worked-example"
    if block.info == "sh":
        return "shell"
    if block.info == "yaml":
        return yaml_kind(yaml.safe_load(block.body))
    return "unknown"


def yaml_kind(data: Any) -> str:
    if isinstance(data, list) and data and all(isinstance(e, dict) and "model" in e for e in data):
        return "scenario-gpus"
    if not isinstance(data, dict):
        return "unknown"
    if "gpus" in data:
        return "scenario"
    if "rules" in data:
        return "adapter-config"
    if set(data) <= {"metrics", "behavior", "minReplicas", "maxReplicas"}:
        return "hpa-spec"
    if set(data) <= SCALED_OBJECT_SPEC:
        return "scaledobject-spec"
    return "exporter-config"  # its loader refuses any key it does not know


def substitutions(line: str) -> tuple[str, list[str]]:
    """``line`` with each ``$(…)`` (nested parentheses and quotes allowed) replaced by one word,
    and the commands they held."""
    outer, inner = "", []
    i = 0
    while i < len(line):
        if line.startswith("$(", i):
            depth, j, quote = 1, i + 2, ""
            while j < len(line) and depth:
                c = line[j]
                if quote:
                    quote = "" if c == quote else quote
                elif c in "'\"":
                    quote = c
                elif c in "()":
                    depth += 1 if c == "(" else -1
                j += 1
            inner.append(line[i + 2 : j - 1])
            outer += "SUBSTITUTED"
            i = j
        else:
            outer += line[i]
            i += 1
    return outer, inner


def commands(script: str) -> list[list[str]]:
    """Each simple command of a shell snippet as words: continuation lines joined, comments
    dropped, split at ``&&``, ``||``, ``;``, ``|`` and ``&``; each ``$(…)`` a command of its own."""
    import shlex

    joined = re.sub(r"\\\n", " ", script)
    out: list[list[str]] = []
    for line in joined.splitlines():
        # A command substitution is a command of its own; in its place, one word.
        line, inner = substitutions(line)
        for command in inner:
            out += commands(command)
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        for word in lexer:
            if set(word) <= set(";&|"):
                if words:
                    out.append(words)
                words = []
            else:
                words.append(word)
        if words:
            out.append(words)
    return out
