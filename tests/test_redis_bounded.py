"""Redis answers are bounded as they are read: a server announcing a gigabyte string, a billion
elements, arrays nested without end or an endless line is cut off at the answer bound
(``max_body_bytes``), the source is down with its reason, and a real Redis beside it keeps being
read. The hostile server counts what it managed to send before the exporter hung up."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis
from queue_harness import QueueHarness, eventually
from resp_fake import ANNOUNCED, HostileRedis
from servers import Process, redis_server

MIB = 2**20
REASONS = {
    "huge-string": "Redis answer larger than 1 MiB (max_body_bytes)",
    "many-elements": "Redis answer larger than 1 MiB (max_body_bytes)",
    "deep": "Redis answer nested deeper than 8 levels",
    "long-line": "Redis answer has a line longer than 64 KiB",
}


@pytest.fixture(scope="module")
def real() -> Iterator[Process]:
    with redis_server() as p:
        redis.Redis(port=p.extra["port"]).rpush("jobs", "a", "b")
        yield p


@pytest.mark.parametrize("mode", sorted(REASONS))
async def test_a_hostile_answer_is_cut_off_at_the_bound(real: Process, mode: str) -> None:
    with HostileRedis(mode) as hostile:
        entries = [
            {"name": "hostile", "kind": "redis", "url": hostile.url, "key": "jobs", "max_body_bytes": MIB},
            {"name": "real", "kind": "redis", "url": real.url, "key": "jobs"},
        ]
        async with QueueHarness(entries) as h:
            await eventually(lambda: h.api("hostile")["error"], what="hostile source down")
            assert hostile.answered.is_set()
            assert h.api("hostile")["error"] == REASONS[mode]
            assert h.up("hostile") == 0 and h.depth("hostile") is None
            await eventually(lambda: h.depth("real") == 2, what="the real Redis still read")
    # Sent before the exporter hung up: the bound plus what the kernel's socket buffers held
    # (a few MiB on loopback), never the gigabyte announced.
    assert hostile.sent < 32 * MIB < ANNOUNCED, hostile.sent


async def test_the_bound_is_the_configured_one_and_fails_only_its_source(real: Process) -> None:
    """A real stream whose entries are 200 KiB each: its XINFO STREAM answer carries the first and
    last entries whole (400 KiB), over a 256 KiB bound and under the default 16 MiB. A list on the
    same server under the same bound shares the pipeline of the stream's commands, and is still
    read: only the source whose answer is too large fails."""
    r = redis.Redis(port=real.extra["port"])
    for _ in range(3):
        r.xadd("frames", {"jpeg": b"x" * 200 * 1024})
    r.xgroup_create("frames", "workers", id="0")
    small = {"kind": "redis", "url": real.url, "key": "frames", "group": "workers", "max_body_bytes": 2**18}
    entries = [
        {"name": "small", **small},
        {"name": "default", **{**small, "max_body_bytes": None}},
        {"name": "beside", "kind": "redis", "url": real.url, "key": "jobs", "max_body_bytes": 2**18},
    ]
    async with QueueHarness(entries) as h:
        await eventually(lambda: h.depth("default") == 3, what="lag 3 under the default bound")
        await eventually(lambda: h.api("small")["error"], what="small bound refused")
        assert h.api("small")["error"] == "Redis answer larger than 262,144 bytes (max_body_bytes)"
        for _ in range(5):  # polls go on: the list keeps its depth, the stream stays down
            await eventually(lambda: h.depth("beside") == 2, what="the list beside it read")
            assert h.up("small") == 0 and h.depth("small") is None
            await asyncio.sleep(0.2)
