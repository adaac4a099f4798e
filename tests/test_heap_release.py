"""Start-up's freed heap pages go back to the system (glibc's malloc_trim); threads share the main heap."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHILD = r"""
from rightsizer_core.heap import release_free_heap

def rss_kib():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])

# 40 MiB in 1 KiB objects, below glibc's mmap threshold: they live in the heap, and freeing them
# leaves free pages there; an object kept at the end pins the top, so the heap cannot just shrink.
garbage = [bytes(1024) for _ in range(40 * 1024)]
keep = bytes(1024)
del garbage
before = rss_kib()
ok = release_free_heap()
print(ok, before, rss_kib())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RSS from /proc")
def test_freed_heap_pages_leave_the_rss() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True).stdout
    ok, before, after = out.split()
    if ok != "True":
        pytest.skip("the C library has no malloc_trim")
    # At least three quarters of the 40 MiB freed leave the RSS.
    assert int(before) - int(after) >= 30 * 1024, out


ARENAS = r"""
import sys, threading
from rightsizer_core.heap import one_malloc_arena

def big_anonymous_maps():
    # glibc reserves each thread arena as a 64 MiB (HEAP_MAX_SIZE) anonymous mapping
    n = 0
    for line in open("/proc/self/maps"):
        f = line.split()
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        if len(f) < 6 and hi - lo >= 32 * 2**20:
            n += 1
    return n

ok = one_malloc_arena() if sys.argv[1] == "one" else True
before = big_anonymous_maps()
def work():
    global kept
    kept = [bytes(4096) for _ in range(64)]  # above pymalloc's 512 bytes: glibc malloc
t = threading.Thread(target=work); t.start(); t.join()
print(ok, big_anonymous_maps() - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mappings from /proc")
def test_a_thread_allocates_from_the_main_heap_with_one_arena() -> None:
    def new_maps(mode: str) -> tuple[str, int]:
        out = subprocess.run([sys.executable, "-c", ARENAS, mode], capture_output=True, text=True, check=True)
        ok, n = out.stdout.split()
        return ok, int(n)

    ok, shared = new_maps("one")
    if ok != "True":
        pytest.skip("the C library has no mallopt")
    _, own = new_maps("default")
    assert own >= 1  # by default the thread got an arena of its own (the premise of the test)
    assert shared == 0
