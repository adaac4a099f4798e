"""Give the C heap's free pages back to the system once start-up is over.

Start-up (imports, configuration, the first cycle) frees much of what it allocates, but glibc keeps
the freed pages in its heap, where they count in the process's RSS until reused. ``malloc_trim(0)``
returns whole free pages to the system; it is called once, after start-up, and is a no-op where
the C library has no such function (musl, macOS)."""

from __future__ import annotations

import ctypes


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
