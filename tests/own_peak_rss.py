"""Runs a command and writes the command's own peak RSS (bytes) to a file when it ends.

    python own_peak_rss.py OUT_FILE ADDRESS_SPACE_BYTES COMMAND [ARGS...]

Why a process in between: ``wait4``'s ``ru_maxrss`` of a child also counts the pages its parent
held when it forked (Linux carries the pre-``exec`` memory's high-water mark into the new
program's), so a child of a large test runner would read as large as the runner. This launcher
is small; the command, forked from it, starts from its few MiB. SIGTERM and SIGINT are passed on to
the command; the launcher exits with the command's exit code (128 + N when signal N ended it) and
sets the command's address-space limit (a safety net, not the measure).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path


def main() -> None:
    out, limit, command = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]

    def limit_address_space() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    proc = subprocess.Popen(command, preexec_fn=limit_address_space)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, _frame: proc.send_signal(number))
    while True:
        try:
            _, status, usage = os.wait4(proc.pid, 0)
            break
        except InterruptedError:
            continue
    proc.returncode = os.waitstatus_to_exitcode(status)
    out.write_text(str(usage.ru_maxrss * 1024))  # kilobytes on Linux
    code = proc.returncode
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
