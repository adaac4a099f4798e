"""The worked right-sizing examples of docs/rightsizing.md are what the program prints for their scenario GPUs
(with the simulated clock pinned, so the figures in the reasons do not move with the day)."""

from __future__ import annotations

import re
from pathlib import Path

from servers import ROOT
from test_rightsizing_scenarios import conclusions

START = 1767225600.0  # 2026-01-01T00:00:00Z
EXAMPLE = re.compile(
    r"\(`(?P<file>[a-z_]+\.yaml)`, `(?P<gpu>[^`]+)`\)[^\n]*\n(?:[^\n`]*\n)*?```text\n"
    r"verdict: (?P<verdict>\S+)\nrecommended: (?P<recommended>\S+)\nreason: (?P<reason>[^\n]*)\n```"
)


async def test_every_worked_example_is_what_the_engine_prints() -> None:
    text = (ROOT / "docs" / "rightsizing.md").read_text()
    section = text.split("# Right-sizing", 1)[1].split("\n## ", 1)[0]
    examples = list(EXAMPLE.finditer(section))
    verdicts = {m["verdict"] for m in examples}
    assert verdicts == {"idle", "overprovisioned", "rightsized", "underprovisioned", "insufficient_data"}
    for m in examples:
        got = (await conclusions(Path(__file__).parent / "scenarios" / m["file"], START))[m["gpu"]]
        assert (got["verdict"], got["recommended"], got["reason"]) == (
            m["verdict"], m["recommended"], m["reason"],
        ), f"docs/rightsizing.md example {m['file']} {m['gpu']}"  # fmt: skip
