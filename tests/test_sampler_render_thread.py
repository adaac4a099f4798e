"""Where an exposition is rendered: a fleet whose last render was quick renders on the event loop
(a worker thread hand-off would cost more than the render); the first render, and every one after a
render slower than ``INLINE_RENDER_SECONDS``, runs in a worker thread so that the event loop keeps
answering meanwhile. Either way the bytes are the same."""

from __future__ import annotations

import threading

import pytest
from fakes import FakeSource

from exporter import sampler as sampler_module
from exporter.render import Exposition, Renderer
from exporter.sampler import Sampler
from rightsizer_core.snapshot import Snapshot


class RecordingRenderer(Renderer):
    def __init__(self) -> None:
        super().__init__()
        self.threads: list[str] = []

    def render(self, snap: Snapshot) -> Exposition:
        self.threads.append(threading.current_thread().name)
        return super().render(snap)


async def _scraped_cycles(n: int) -> tuple[list[str], list[bytes]]:
    """``n`` cycles, each scraped once (as /metrics asks for the bytes)."""
    renderer = RecordingRenderer()
    s = Sampler(FakeSource(2), renderer, interval=3600, hostname="node-a")
    bodies = []
    for _ in range(n):
        bodies.append(await s.body(await s.cycle(), False, False))
    return renderer.threads, bodies


async def test_quick_renders_run_on_the_event_loop_after_the_first() -> None:
    loop_thread = threading.current_thread().name
    threads, _ = await _scraped_cycles(4)
    assert len(threads) == 4
    assert threads[0] != loop_thread  # the first: its cost is not known yet
    assert threads[1:] == [loop_thread] * 3


async def test_slow_renders_stay_in_a_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    loop_thread = threading.current_thread().name
    monkeypatch.setattr(sampler_module, "INLINE_RENDER_SECONDS", 0.0)  # every render counts as slow
    threads, slow_bodies = await _scraped_cycles(4)
    assert len(threads) == 4 and loop_thread not in threads
    monkeypatch.undo()
    _, quick_bodies = await _scraped_cycles(4)
    assert slow_bodies == quick_bodies
