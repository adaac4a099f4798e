"""The marked examples of the README and docs/*.md are executable documentation: each runs here and
must print what the document says.

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

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARK = re.compile(r"<!-- example: (output|runs)(?:, prints (.+?))? -->\n```[a-z]*\n(.*?)```", re.S)
BIN = Path(sys.executable).parent
COMMANDS = {"rightsizer": [sys.executable, "-m", "rightsizing.command.cli"]}


@dataclass(frozen=True)
class Example:
    kind: str
    prints: str | None
    body: str
    line: int
    document: str

    @property
    def where(self) -> str:
        return f"{self.document}:{self.line}"


def examples() -> list[Example]:
    found = []
    for path in DOCUMENTS:
        text = path.read_text()
        found += [
            Example(m[1], m[2], m[3], text.count("\n", 0, m.start()) + 1, path.relative_to(ROOT).as_posix())
            for m in MARK.finditer(text)
        ]
    return found


def test_the_documents_mark_examples() -> None:
    kinds = [e.kind for e in examples()]
    assert "output" in kinds and "runs" in kinds


@pytest.mark.parametrize("example", [e for e in examples() if e.kind == "output"], ids=lambda e: e.where)
def test_output_example_prints_what_the_readme_shows(example: Example) -> None:
    first, _, expected = example.body.partition("\n")
    assert first.startswith("$ "), f"{example.where}: an output example starts with '$ COMMAND'"
    words = shlex.split(first[2:])
    out = subprocess.run(
        [*COMMANDS[words[0].removeprefix(".venv/bin/")], *words[1:]],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout == expected, f"{example.where} differs from what `{first[2:]}` prints"


@pytest.mark.parametrize("example", [e for e in examples() if e.kind == "runs"], ids=lambda e: e.where)
def test_script_example_runs(example: Example) -> None:
    stdout, stderr, code = run_script(example.body.replace(".venv/bin/", f"{BIN}/"), ROOT)
    assert code == 0, f"{example.where} failed:\n{stderr[-2000:]}"
    if example.prints:
        assert example.prints in stdout, f"{example.where} did not print {example.prints}:\n{stdout[-2000:]}"


def run_script(script: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[str, str, int]:
    """Runs ``script`` (bash, -euo pipefail) in ``cwd`` with the fixed ports it names (9430, 6443,
    9443) replaced by free loopback ports and the exporter pointed at its port; kills what it left
    running. Returns its standard output and error and its exit code."""
    ports = {p: str(free_port()) for p in ("9430", "6443", "9443")}
    for fixed, port in ports.items():
        script = script.replace(f":{fixed}", f":{port}")
    env = {**(os.environ if env is None else env), "RIGHTSIZER_LISTEN": f"127.0.0.1:{ports['9430']}"}
    proc = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
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
    return stdout, stderr, proc.returncode
