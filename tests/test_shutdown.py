"""Stopping is bounded and exits 0: a stop signal while the modules load, a cancellation that the
refresh loop could lose, a shutdown step that hangs.

- SIGTERM while ``python -m adapter`` / ``python -m exporter`` is still importing its modules: a
  ``sitecustomize`` on the child's path adds an import finder that sends the process SIGTERM when
  the command-line module starts loading, so the signal lands inside that import whatever its
  speed (a signal sent from outside on the package's ``-X importtime`` line raced a command-line
  module that had become cheap to load); the exit code must be 0, not -15, and the command-line
  module's ``main`` never runs (``--version`` prints nothing).
- Python 3.11's ``asyncio.wait_for`` returns the result instead of raising CancelledError when the
  awaited step ends in the loop turn that cancels it; a refresh whose collect ends exactly then must
  still stop the refresh loop.
- ``stop_event(deadline)``: a program whose shutdown hangs is still gone, with code 0, once the
  deadline passes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from servers import ROOT

from adapter.cache import Cache
from adapter.rules import BUILTIN_RULES, RuleConfig
from adapter.selfmetrics import AdapterMetrics
from adapter.sources import RuleResult

SIGNAL_ON_IMPORT = """
import os, signal, sys


class SignalOnImport:
    \"\"\"Sends this process SIGTERM when the named module starts loading, then lets the normal
    finders go on: the handler runs at the next bytecode, inside that module's import.\"\"\"

    def find_spec(self, name, path=None, target=None):
        if name == os.environ["SIGNAL_ON_IMPORT"]:
            print("signalled on import of", name, file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGTERM)
        return None


sys.meta_path.insert(0, SignalOnImport())
"""


@pytest.mark.parametrize("program", ["adapter", "exporter"])
def test_sigterm_while_importing_exits_0(program: str, tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(SIGNAL_ON_IMPORT)
    env = dict(os.environ, SIGNAL_ON_IMPORT=f"{program}.cli")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", program, "--version"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )
    assert f"signalled on import of {program}.cli" in proc.stderr, ("no signal sent", proc.stderr[-2000:])
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    assert not proc.stdout, "main ran (it printed the version): the signal did not stop the import"


class GatedSource:
    """A source whose collect waits until the test opens the gate (a future it sets)."""

    name = "gated"
    interval = 0.01

    def __init__(self) -> None:
        self.waiting = asyncio.Event()
        self.gate: asyncio.Future[dict[str, RuleResult]] | None = None
        self.collects = 0

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def collect(self, rules: Sequence[RuleConfig], everything: bool = True) -> dict[str, RuleResult]:
        self.collects += 1
        self.gate = asyncio.get_running_loop().create_future()
        self.waiting.set()
        return await self.gate

    def next_delay(self, elapsed: float, age: float = 0.0) -> float:
        return 0.0


async def test_a_cancel_in_the_loop_turn_the_collect_ends_stops_the_refresh_loop() -> None:
    source = GatedSource()
    cache = Cache(BUILTIN_RULES, source, AdapterMetrics())  # type: ignore[arg-type]
    task = asyncio.create_task(cache.run())
    await source.waiting.wait()
    assert source.gate is not None
    # In one step: the collect can finish (its task runs first), and the loop is cancelled.
    source.gate.set_result({r.name: RuleResult() for r in BUILTIN_RULES})
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=10)
    assert task in done, f"the refresh loop went on after its cancellation ({source.collects} collects)"
    assert task.cancelled()
    if source.gate is not None and not source.gate.done():
        source.gate.cancel()


def run_python(code: str, **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        **kw,
    )


def test_a_hanging_shutdown_ends_at_the_deadline_with_code_0() -> None:
    proc = run_python(
        """
        import asyncio, time
        from rightsizer_core.stopping import stop_event

        async def main():
            stop = stop_event(1.0, lambda: print("deadline", flush=True))
            print("ready", flush=True)
            await stop.wait()
            time.sleep(120)  # a shutdown step that never ends, holding the event loop

        asyncio.run(main())
        """
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)  # far less than the 120 s hang
    assert proc.returncode == 0, (proc.returncode, err)
    assert out.strip() == "deadline", (out, err)
