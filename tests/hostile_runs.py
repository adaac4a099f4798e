"""Running the real programs against hostile input: exit code, stderr, peak RSS of that one child.

The program runs under ``own_peak_rss.py``, which reads its peak resident set size with ``wait4``
(``ru_maxrss`` of a direct child of this test runner would count the runner's own pages at fork),
and gives it an address-space limit so a regression cannot take the machine's memory with it: it
then fails with its RSS over the bound.
"""

from __future__ import annotations

import os
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


LAUNCHER = Path(__file__).with_name("own_peak_rss.py")


def start(
    program: str, args: list[str], tmp: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """``python -m <program> ARGS`` with stdout and stderr in files under ``tmp``, under the
    launcher that measures its own peak RSS (signals sent to the Popen reach the program)."""
    out = (tmp / f"{program}.out").open("w")
    err = (tmp / f"{program}.err").open("w")
    peak = tmp / f"{program}.peak-rss"
    peak.unlink(missing_ok=True)
    return subprocess.Popen(
        [sys.executable, str(LAUNCHER), str(peak), str(ADDRESS_SPACE), sys.executable, "-m", program, *args],
        stdout=out,
        stderr=err,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        text=True,
        start_new_session=True,  # the deadline kills the launcher and the program together
    )


def finish(proc: subprocess.Popen[str], program: str, tmp: Path, deadline_seconds: float) -> Outcome:
    """Wait for ``proc`` at most ``deadline_seconds`` (then kill it: returncode None)."""
    deadline = time.monotonic() + deadline_seconds
    status: int | None = None
    while True:
        pid, raw, _ = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            status = os.waitstatus_to_exitcode(raw)
            status = 128 - status if status > 128 else status  # the launcher's 128 + N: signal N
            break
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            os.wait4(proc.pid, 0)
            break
        time.sleep(0.05)
    proc.returncode = status if status is not None else -signal.SIGKILL  # Popen must not wait again
    peak = tmp / f"{program}.peak-rss"
    return Outcome(
        status,
        (tmp / f"{program}.out").read_text(errors="replace"),
        (tmp / f"{program}.err").read_text(errors="replace"),
        int(peak.read_text()) if peak.exists() else 0,
    )


def run_program(
    program: str, args: list[str], tmp: Path, env: dict[str, str] | None = None, deadline_seconds: float = 60
) -> Outcome:
    return finish(start(program, args, tmp, env), program, tmp, deadline_seconds)
