"""Where a Python process keeps its event loop waiting: loaded by ``bench/adapter_latency.py
--lock-holds`` through ``PYTHONPATH`` into the adapter it starts, never by the adapter itself.

A thread asks to sleep 1 ms over and over; how late it wakes is how long it waited for the
interpreter lock (or for a core), as the event loop waits each time it wakes. Each wake later than
10 ms records when, how late, and what every thread but the main one was running (a worker holding
the lock in one long C call is still on that line, or the next). The cyclic collector's runs are
timed by generation. Every second all of it is written as JSON to the file ``LOCKWATCH`` names, so
that the bench can take what happened during its load."""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
import traceback
from typing import Any

TICK = 0.001
LATE = 0.010
KEPT = 20_000  # late wakes remembered


def _where(frame: Any) -> str:
    stack = traceback.extract_stack(frame)[-3:]
    return " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno}:{f.name}" for f in reversed(stack))


def _watch(path: str) -> None:
    late: list[tuple[float, float, list[str]]] = []
    collections: dict[str, list[float]] = {}  # generation: [runs, seconds, longest]
    started = [0.0]

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
            return
        took = time.perf_counter() - started[0]
        runs = collections.setdefault(str(info["generation"]), [0, 0.0, 0.0])
        runs[0] += 1
        runs[1] += took
        runs[2] = max(runs[2], took)

    gc.callbacks.append(timed)
    me = threading.get_ident()
    ticks = 0
    written = time.monotonic()
    while True:
        before = time.perf_counter()
        time.sleep(TICK)
        lag = time.perf_counter() - before - TICK
        ticks += 1
        if lag > LATE and len(late) < KEPT:
            names = {t.ident: t.name for t in threading.enumerate()}
            running = []
            for ident, frame in sys._current_frames().items():
                if ident == me or names.get(ident) == "MainThread":
                    continue
                where = _where(frame)
                top = where.split(" <- ")[0]
                if top.startswith("thread.py:") and top.endswith(":_worker"):
                    continue  # a worker waiting for work
                running.append(f"{names.get(ident, '?')}: {where}")
            late.append((time.time(), lag * 1000, running))
        if time.monotonic() - written >= 1.0:
            written = time.monotonic()
            with open(path + ".tmp", "w") as out:
                json.dump({"ticks": ticks, "late": late, "collections": collections}, out)
            os.replace(path + ".tmp", path)


if os.environ.get("LOCKWATCH"):
    threading.Thread(target=_watch, args=(os.environ["LOCKWATCH"],), daemon=True, name="lockwatch").start()
