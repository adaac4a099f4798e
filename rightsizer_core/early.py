"""Exit code 0 for a stop signal that arrives while a program is still loading its modules.

A program's package calls ``exit_quietly_while_importing`` first thing, before it imports anything
heavy: until ``stopping.exiting_on_stop_signals`` takes over in ``main``, SIGTERM would otherwise
end the process with -15 (the default action) and SIGINT with a KeyboardInterrupt traceback. Only
the standard library's ``os``, ``signal`` and ``sys`` are imported here, so the window before the
handlers are in place is as short as the interpreter's own start-up.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType


def _exit_now(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def exit_quietly_while_importing(program: str) -> None:
    """When this process runs ``program`` (its console script, or ``python -m <package>``, whose
    ``sys.argv[0]`` reads ``-m`` while the package loads), make SIGTERM and SIGINT exit with code 0.
    A library import inside another program (a test runner) changes nothing."""
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 != "-m" and os.path.basename(argv0) != program:
        return
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
                signal.signal(sig, _exit_now)
        except ValueError:  # not the main thread: signals are not ours to handle
            return
