"""The README's marked examples are executable documentation: each runs here and must print what the
README says.

A fenced block right after ``<!-- example: output -->`` starts with ``$ COMMAND``; the rest of the
block is exactly what COMMAND prints. A block after ``<!-- example: runs[, prints TEXT] -->`` is a
shell script: it must exit 0 (and print TEXT). Scripts run from the repository root with this
interpreter's bin directory for ``.venv/bin/``; the fixed ports they name (9430, 6443, 9443) are
replaced by free loopback ports so parallel runs cannot collide, and the exporter is pointed at
its port through ``RIGHTSIZER_LISTEN``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from servers import ROOT, free_port

README = ROOT / "README.md"
MARK = re.compile(r"<!-- example: (output|runs)(?:, prints (.+?))? -->\n```[a-z]*\n(.*?)```", re.S)
BIN = Path(sys.executable).parent
COMMANDS = {"rightsizer": [sys.executable, "-m", "rightsizing.command.cli"]}


@dataclass(frozen=True)
class Example:
    kind: str
    prints: str | None
    body: str
    line: int


def examples() -> list[Example]:
    text = README.read_text()
    return [
        Example(m.group(1), m.group(2), m.group(3), text.count("\n", 0, m.start()) + 1)
        for m in MARK.finditer(text)
    ]


def test_the_readme_marks_examples() -> None:
    kinds = [e.kind for e in examples()]
    assert "output" in kinds and "runs" in kinds


@pytest.mark.parametrize(
    "example", [e for e in examples() if e.kind == "output"], ids=lambda e: f"line{e.line}"
)
def test_output_example_prints_what_the_readme_shows(example: Example) -> None:
    first, _, expected = example.body.partition("\n")
    assert first.startswith("$ "), f"README.md:{example.line}: an output example starts with '$ COMMAND'"
    words = shlex.split(first[2:])
    out = subprocess.run(
        [*COMMANDS[words[0]], *words[1:]], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == expected, f"README.md:{example.line} differs from what `{first[2:]}` prints"


@pytest.mark.parametrize(
    "example", [e for e in examples() if e.kind == "runs"], ids=lambda e: f"line{e.line}"
)
def test_script_example_runs(example: Example) -> None:
    ports = {p: str(free_port()) for p in ("9430", "6443", "9443")}
    script = example.body.replace(".venv/bin/", f"{BIN}/")
    for fixed, port in ports.items():
        script = script.replace(f":{fixed}", f":{port}")
    env = {**os.environ, "RIGHTSIZER_LISTEN": f"127.0.0.1:{ports['9430']}"}
    proc = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its background jobs are killed with it, by its process group
    )
    try:
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        with contextlib.suppress(ProcessLookupError):  # whatever the script left running
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    assert proc.returncode == 0, f"README.md:{example.line} failed:\n{stderr[-2000:]}"
    if example.prints:
        assert example.prints in stdout, (
            f"README.md:{example.line} did not print {example.prints}:\n{stdout[-2000:]}"
        )
