"""Running the real programs against hostile input: exit code, stderr, peak RSS of that one child.

``run_program`` waits with ``os.wait4`` so the peak resident set size is the child's own (not the
largest of every child this test run ever started), and gives the child an address-space limit so a
regression cannot take the machine's memory with it: it then fails with its RSS over the bound.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from servers import ROOT

MIB = 2**20
# The manifests' memory limits (deploy/): the exporter DaemonSet 192Mi, the adapter 256Mi.
RSS_LIMIT = {"exporter": 192 * MIB, "adapter": 256 * MIB}
ADDRESS_SPACE = 3 * 2**30  # a safety net only; the assertions are on RSS


@dataclass
class Outcome:
    returncode: int | None  # None: still running at the deadline (then killed)
    stdout: str
    stderr: str
    max_rss_bytes: int

    def one_line(self, program: str) -> str:
        """The program's single error line; asserts there is exactly one line and no traceback."""
        text = self.stdout + self.stderr
        assert "Traceback" not in text, text
        lines = self.stderr.splitlines()
        assert len(lines) == 1, text
        assert lines[0].startswith(f"rightsizer-{program}: "), text
        return lines[0]


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def start(
    program: str, args: list[str], tmp: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """``python -m <program> ARGS`` with stdout and stderr in files under ``tmp``."""
    out = (tmp / f"{program}.out").open("w")
    err = (tmp / f"{program}.err").open("w")
    return subprocess.Popen(
        [sys.executable, "-m", program, *args],
        stdout=out,
        stderr=err,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        text=True,
        preexec_fn=_limit_address_space,
    )


def finish(proc: subprocess.Popen[str], program: str, tmp: Path, deadline_seconds: float) -> Outcome:
    """Wait for ``proc`` at most ``deadline_seconds`` (then kill it: returncode None)."""
    deadline = time.monotonic() + deadline_seconds
    status: int | None = None
    usage = None
    while True:
        pid, raw, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            status = os.waitstatus_to_exitcode(raw)
            break
        if time.monotonic() > deadline:
            os.kill(proc.pid, signal.SIGKILL)
            _, _, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.05)
    proc.returncode = status if status is not None else -signal.SIGKILL  # Popen must not wait again
    return Outcome(
        status,
        (tmp / f"{program}.out").read_text(errors="replace"),
        (tmp / f"{program}.err").read_text(errors="replace"),
        usage.ru_maxrss * 1024,  # kilobytes on Linux
    )


def run_program(
    program: str, args: list[str], tmp: Path, env: dict[str, str] | None = None, deadline_seconds: float = 60
) -> Outcome:
    return finish(start(program, args, tmp, env), program, tmp, deadline_seconds)
