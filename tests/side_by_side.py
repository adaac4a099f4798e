"""CPU-bound fixtures run side by side: one spawned process per core (a fork is not safe, as the
test process may hold threads).

A spawned process starts from the test process's ``sys.path``, where some modules put ``bench/``
(whose ``exporter.py`` would shadow the exporter package once imported afresh): each process puts
the repository's root first before it unpickles a task, so the package it imports is the one the
test process runs.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TypeVar

ROOT = str(Path(__file__).resolve().parents[1])

T = TypeVar("T")
R = TypeVar("R")


def side_by_side(task: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
    """``map(task, items)``, in order, one process per core; in this process where there is one core.
    ``task`` must be a module-level function of a test helper or test module (it is pickled by name)."""
    todo = list(items)
    workers = min(len(todo), os.cpu_count() or 1)
    if workers < 2:
        yield from map(task, todo)
        return
    root_first = f"import sys; sys.path.insert(0, {ROOT!r})"
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=spawn, initializer=exec, initargs=(root_first,)) as pool:
        yield from pool.map(task, todo)
