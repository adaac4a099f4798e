"""The README as a new user lives it: its commands as written, in a fresh copy of the repository
where nothing has made or activated a virtual environment.

The first command (make the venv, install the package, start the simulated exporter) runs as
written, its port swapped for a free one; the JSON the README names for each GPU's verdict is read
from it; then every runnable example of the README runs as written against that venv (the quick
start, a plan). Its programs are not on PATH: a bare ``rightsizer`` would say "command not found",
so every command of the README and of docs/rightsizing.md that runs one of them names
``.venv/bin/`` (or follows ``. .venv/bin/activate``), which the static test below requires.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from doc_blocks import blocks, commands, kind
from servers import ROOT, free_port, http_get, wait_for
from test_readme_examples import examples, run_script

README = ROOT / "README.md"
OURS = {"rightsizer", "rightsizer-exporter", "rightsizer-adapter"}
SHELL_WORDS = {"until", "while", "do", "done", "if", "then", "fi", "!"}
ACTIVATE = (["source", ".venv/bin/activate"], [".", ".venv/bin/activate"])
# A copy of what a clone holds: no virtual environment, tools, caches or build metadata.
LEFT_OUT = (".venv", ".git", ".tools", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache",
            "*.egg-info")  # fmt: skip


def first_command() -> str:
    """The README's first command line (of its first block, comments left out)."""
    first_block = README.read_text().split("```sh\n", 1)[1].split("```", 1)[0]
    return next(line for line in first_block.splitlines() if line.strip() and not line.startswith("#"))


def bare_commands(path: Path) -> list[str]:
    """Commands of ``path``'s shell blocks that run one of our programs by its bare name."""
    out = []
    for block in blocks(path):
        if kind(block) not in ("shell", "runs", "output"):
            continue
        activated = False
        body = "\n".join(line.removeprefix("$ ") for line in block.body.splitlines())
        for words in commands(body):
            words = [w for w in words if w not in SHELL_WORDS]
            activated = activated or words[:2] in ACTIVATE
            if words and words[0] in OURS and not activated:
                out.append(f"{block.where}: {' '.join(words)[:80]}")
    return out


def test_commands_name_the_venv_they_run_from() -> None:
    assert [*bare_commands(README), *bare_commands(ROOT / "docs" / "rightsizing.md")] == []


def test_the_readme_as_written_in_a_fresh_venv(tmp_path: Path) -> None:
    clone = tmp_path / "rightsizer"
    shutil.copytree(ROOT, clone, ignore=shutil.ignore_patterns(*LEFT_OUT), symlinks=True)
    # A shell of one's own: this suite's virtual environment neither active nor on PATH.
    ours = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p and p != ours)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = path
    assert shutil.which("rightsizer", path=path) is None

    line = first_command()
    assert line.startswith("python3 -m venv .venv && ") and ":9430" in line, line
    port = free_port()
    log = tmp_path / "first-command.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", line.replace(":9430", f":{port}")],
            cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
    try:
        started = wait_for(
            lambda: proc.poll() is None and re.search(r"msg=listening .*url=(\S+)", log.read_text()),
            300, interval=0.5, what="the first command's exporter to listen",
        )  # fmt: skip
        assert started.group(1) == f"http://127.0.0.1:{port}/", started.group(0)  # loopback only
        # The JSON the README names for each GPU's verdict.
        url = re.search(r"`curl -s (http://127\.0\.0\.1:9430/api/v1/gpus)`", README.read_text())
        assert url, "the README names /api/v1/gpus for each GPU's verdict"
        status, _, body = http_get(url.group(1).replace(":9430", f":{port}"))
        gpus = json.loads(body)["gpus"]
        assert status == 200 and len(gpus) == 8
        assert all(g["rightsizing"]["verdict"] and g["rightsizing"]["reason"] for g in gpus), gpus[0]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
    assert (clone / ".venv" / "bin" / "rightsizer").exists()

    # Then every runnable example of the README, as written, against that venv.
    runnable = [e for e in examples() if e.document == "README.md" and e.kind == "runs"]
    assert len(runnable) >= 2
    for example in runnable:
        stdout, stderr, code = run_script(example.body, clone, env)
        assert code == 0, f"{example.where} failed:\n{stderr[-2000:]}"
        assert example.prints is None or example.prints in stdout, (example.where, stdout[-2000:])
