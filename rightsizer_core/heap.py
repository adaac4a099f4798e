"""Give the C heap's free pages back to the system once start-up is over.

Start-up (imports, configuration, the first cycle) frees much of what it allocates, but glibc keeps
the freed pages in its heap, where they count in the process's RSS until reused. ``malloc_trim(0)``
returns whole free pages to the system; it is called once, after start-up, and is a no-op where
the C library has no such function (musl, macOS)."""

from __future__ import annotations

import ctypes
import gc


def release_free_heap() -> bool:
    """Call glibc's ``malloc_trim(0)``; False when the C library has no ``malloc_trim``."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    trim(0)
    return True


M_ARENA_MAX = -8  # glibc's mallopt parameter


def one_malloc_arena() -> bool:
    """Have every thread allocate from glibc's main heap (``mallopt(M_ARENA_MAX, 1)``) instead of an
    arena of its own per thread; call before threads start. False where there is no ``mallopt``."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, 1))


# Full collections of the cyclic GC, at most this often (``scheduled_full_collections``).
FULL_COLLECTION_SECONDS = 300.0
_NEVER = 2**31 - 1  # a gen-1 count the automatic full collection never reaches


def scheduled_full_collections() -> None:
    """Leave the cyclic GC's full (oldest generation) collections to ``full_collection_due``.

    A process that replaces hundreds of thousands of long-lived objects every few seconds (the
    adapter's cache at fleet scale) sends them all to the oldest generation, and CPython then runs
    a full collection about once a second, each stopping every thread for 100-200 ms while it walks
    every object (measured at 40,000 GPUs: docs/fleet-scale.md). Those objects do not form cycles
    (reference counting frees them), so the young collections, which find the cycles of requests
    and tasks, stay as they are, and a full collection runs on a schedule instead."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, _NEVER)


def full_collection_due(last: float, now: float) -> bool:
    """Run a full collection if the last was ``FULL_COLLECTION_SECONDS`` ago; whether it ran."""
    if now - last < FULL_COLLECTION_SECONDS:
        return False
    gc.collect()
    return True
