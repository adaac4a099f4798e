"""Stopping is bounded and exits 0: a stop signal while the modules load, a cancellation that the
refresh loop could lose, a shutdown step that hangs.

- SIGTERM while ``python -m adapter`` / ``python -m exporter`` is still importing its modules: the
  signal is sent as soon as the package itself is loaded (read from ``-X importtime``), while the
  command-line module (aiohttp, grpcio, ...: hundreds of milliseconds) is still loading, so the
  import never finishes; the exit code must be 0, not -15.
- Python 3.11's ``asyncio.wait_for`` returns the result instead of raising CancelledError when the
  awaited step ends in the loop turn that cancels it; a refresh whose collect ends exactly then must
  still stop the refresh loop.
- ``stop_event(deadline)``: a program whose shutdown hangs is still gone, with code 0, once the
  deadline passes.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

import pytest
from servers import ROOT

from adapter.cache import Cache
from adapter.rules import BUILTIN_RULES, RuleConfig
from adapter.selfmetrics import AdapterMetrics
from adapter.sources import RuleResult


@pytest.mark.parametrize("program", ["adapter", "exporter"])
def test_sigterm_while_importing_exits_0(program: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", program, "--version"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.rstrip().endswith(f"| {program}"):  # the package is loaded, its cli is not yet
            proc.send_signal(signal.SIGTERM)
            break
    out, err = proc.communicate(timeout=30)
    text = "".join(seen) + err
    assert not any(line.rstrip().endswith(f"| {program}.cli") for line in text.splitlines()), (
        "the signal came after the import had finished: this run proves nothing"
    )
    assert proc.returncode == 0, (proc.returncode, text[-2000:])
    assert "Traceback" not in text and not out


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

    def next_delay(self, elapsed: float) -> float:
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
