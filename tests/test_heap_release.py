"""Start-up's freed heap pages go back to the system (glibc's malloc_trim)."""

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
