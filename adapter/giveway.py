"""Worker threads give way to the event loop while it answers requests.

At fleet scale a refresh's work (decoding the answers, sorting out their parts and source states,
building the vectors and their indexes) runs in worker threads beside the event loop that answers
requests, in one interpreter. Each time the loop comes back from a system call (a request's
``recv``, its TLS read and write and its ``send``: four a request) it waits for the interpreter lock
while a worker holds it: up to the switch interval (``SWITCH_INTERVAL`` in ``cli.py``) and a
thread's wake-up. At 2,000 requests/s that is 8,000 waits a second, each up to 0.1 ms, and requests
queue behind them for as long as a refresh runs (docs/fleet-scale.md, "The event loop first").

So the workers' long loops call ``give_way`` every ``EVERY`` items. Where the event loop began a
request within the last ``RECENT`` seconds (``serving``) and the calling thread has run ``WORK``
seconds since it last gave way, it sleeps ``PAUSE`` seconds, the lock released, and the loop's
system calls come back to it at once meanwhile. With no request, a worker never pauses; under load,
a refresh takes longer, by up to ``PAUSE / WORK``, and requests do not wait for it. The event
loop's own thread never pauses: the same loops run on it for a small answer and for an index a
request builds, and a pause there would only keep the requests waiting.
"""

from __future__ import annotations

import threading
import time

EVERY = 256  # items between two calls of ``give_way`` in a worker's loop: under a millisecond of work
RECENT = 0.005  # seconds: a request begun within this long and the event loop counts as serving
WORK = 0.002  # seconds a worker runs between two pauses
PAUSE = 0.0005  # seconds of each pause

_monotonic = time.monotonic
_sleep = time.sleep
_served = float("-inf")  # when the event loop last began a request (monotonic)
_serving_thread = -1  # the event loop's thread (``threading.get_ident``): never paused
_local = threading.local()
_lock = threading.Lock()
_pauses = 0  # pauses in this process so far
_paused = 0.0  # seconds they took


def serving() -> None:
    """A request begins (called by the event loop, once per request)."""
    global _served, _serving_thread
    _served = _monotonic()
    _serving_thread = threading.get_ident()


def give_way() -> None:
    """Pause ``PAUSE`` seconds if requests are being answered and this thread, not the event
    loop's, ran ``WORK`` seconds since its last pause."""
    global _pauses, _paused
    now = _monotonic()
    if now - _served >= RECENT:
        return
    since = getattr(_local, "since", 0.0)
    if now - since >= WORK and threading.get_ident() != _serving_thread:
        _sleep(PAUSE)
        _local.since = after = _monotonic()
        with _lock:
            _pauses += 1
            _paused += after - now


def paused() -> tuple[int, float]:
    """The pauses the workers of this process took so far, and the seconds they took."""
    return _pauses, _paused
