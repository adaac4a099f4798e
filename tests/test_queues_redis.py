"""Queue depth from a real redis-server: lists, streams, sorted sets, consumer groups, faults, and a
Redis killed and restarted while the exporter keeps running."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from queue_harness import QueueHarness, eventually
from servers import Process, redis_server


@pytest.fixture
def server() -> Iterator[Process]:
    with redis_server() as p:
        yield p


def client(p: Process, password: str | None = None) -> redis.Redis:
    return redis.Redis(port=p.extra["port"], decode_responses=True, password=password)


def entry(p: Process, name: str, key: str, **extra: object) -> dict[str, object]:
    return {"name": name, "kind": "redis", "url": p.url, "key": key, **extra}


async def test_lengths_of_lists_streams_sorted_sets_and_sets(server: Process) -> None:
    r = client(server)
    r.rpush("jobs", "a", "b", "c")
    for i in range(5):
        r.xadd("events", {"n": i})
    r.zadd("delayed", {"x": 1, "y": 2, "z": 3, "w": 4})
    r.sadd("members", "p", "q")
    entries = [
        entry(server, n, k)
        for n, k in (
            ("jobs", "jobs"),
            ("events", "events"),
            ("delayed", "delayed"),
            ("members", "members"),
            ("empty", "never-created"),
        )
    ]
    async with QueueHarness(entries) as h:
        await eventually(lambda: all(h.depth(str(e["name"])) is not None for e in entries), what="depths")
        assert [h.depth(n) for n in ("jobs", "events", "delayed", "members", "empty")] == [3, 5, 4, 2, 0]
        assert h.value("rightsizer_queue_in_flight", "jobs") is None
        series = h.series()
        assert series[("rightsizer_queue_depth", (("kind", "redis"), ("queue", "jobs")))] == 3
        assert h.api("jobs")["target"] == f"{server.url} key jobs"

        r.rpush("jobs", *"defgh")
        r.xadd("events", {"n": 5})
        r.zrem("delayed", "x", "y")
        r.lpush("never-created", "first")
        await eventually(
            lambda: [h.depth(n) for n in ("jobs", "events", "delayed", "empty")] == [8, 6, 2, 1],
            what="new lengths",
        )

        r.delete("jobs")  # an emptied list disappears; then the key comes back as a stream
        await eventually(lambda: h.depth("jobs") == 0, what="deleted list reads 0")
        r.xadd("jobs", {"a": 1})
        r.xadd("jobs", {"a": 2})
        await eventually(lambda: h.depth("jobs") == 2, what="re-detected as a stream")
        assert h.up("jobs") == 1


async def test_consumer_group_lag_is_depth_and_pending_is_in_flight(server: Process) -> None:
    r = client(server)
    ids = [r.xadd("tasks", {"n": i}) for i in range(10)]
    r.xgroup_create("tasks", "workers", id="0")
    r.xreadgroup("workers", "w1", {"tasks": ">"}, count=4)
    async with QueueHarness([entry(server, "tasks", "tasks", group="workers", labels={"team": "ml"})]) as h:
        await eventually(lambda: h.depth("tasks") == 6, what="lag 6")
        assert h.value("rightsizer_queue_in_flight", "tasks") == 4
        assert h.api("tasks")["target"] == f"{server.url} key tasks group workers"
        r.xack("tasks", "workers", ids[0], ids[1])
        for i in range(3):
            r.xadd("tasks", {"n": 10 + i})
        await eventually(
            lambda: h.depth("tasks") == 9 and h.value("rightsizer_queue_in_flight", "tasks") == 2,
            what="lag 9, pending 2",
        )


async def test_lag_is_counted_when_redis_cannot_compute_it(server: Process) -> None:
    r = client(server)
    ids = [r.xadd("s", {"n": i}) for i in range(5)]
    r.xgroup_create("s", "behind", id="0")  # nothing delivered yet
    r.xgroup_create("s", "middle", id="0")
    r.xreadgroup("middle", "c", {"s": ">"}, count=2)  # delivered ids[0], ids[1]
    r.xdel("s", ids[3])  # a deletion after both groups' positions: Redis stops reporting lag
    r.xdel("s", ids[0])
    lags = {g["name"]: g["lag"] for g in r.xinfo_groups("s")}
    assert lags == {"behind": None, "middle": None}, "precondition: Redis reports no lag"
    entries = [entry(server, "behind", "s", group="behind"), entry(server, "middle", "s", group="middle")]
    async with QueueHarness(entries) as h:
        await eventually(
            lambda: h.depth("behind") is not None and h.depth("middle") is not None, what="depths"
        )
        assert h.depth("behind") == 3  # ids 1, 2, 4: the whole stream
        assert h.depth("middle") == 2  # ids 2 and 4
        assert h.value("rightsizer_queue_in_flight", "middle") == 2


async def test_wrong_keys_and_groups_are_reported(server: Process) -> None:
    r = client(server)
    r.hset("config", "a", "1")
    r.xadd("s", {"n": 1})
    entries = [
        entry(server, "hash", "config"),
        entry(server, "nogroup", "s", group="absent"),
        entry(server, "nostream", "missing", group="g"),
        entry(server, "notstream", "config", group="g"),
    ]
    async with QueueHarness(entries) as h:
        await eventually(lambda: all(h.up(str(e["name"])) == 0 for e in entries), what="all down")
        errors = {n: h.api(n)["error"] for n in ("hash", "nogroup", "nostream", "notstream")}
        assert errors == {
            "hash": "key config holds a hash, not a list, stream, sorted set or set",
            "nogroup": "consumer group absent not found on stream s",
            "nostream": "stream missing does not exist",
            "notstream": "key config is not a stream",
        }
        assert all(h.depth(n) is None for n in errors)


async def test_password_from_file_and_refused_credentials(server: Process, tmp_path: Path) -> None:
    r = client(server)
    r.rpush("jobs", 1, 2)
    r.config_set("requirepass", "pw1")
    (tmp_path / "pw").write_text("pw1\n")
    entries = [
        entry(server, "authed", "jobs", basic_auth={"password_file": str(tmp_path / "pw")}),
        entry(server, "anonymous", "jobs"),
    ]
    try:
        async with QueueHarness(entries) as h:
            await eventually(lambda: h.depth("authed") == 2 and h.up("anonymous") == 0, what="auth outcomes")
            assert h.api("anonymous")["error"].startswith("Redis refused the credentials")
    finally:
        client(server, "pw1").config_set("requirepass", "")


async def test_redis_killed_and_restarted_is_recovered_without_restarting(server: Process) -> None:
    port = server.extra["port"]
    client(server).rpush("jobs", 1, 2, 3)
    entries = [entry(server, "jobs", "jobs", timeout=0.5, backoff_max=0.5)]
    async with QueueHarness(entries) as h:
        await eventually(lambda: h.depth("jobs") == 3, what="depth 3")
        first_success = h.value("rightsizer_queue_last_success_timestamp_seconds", "jobs")
        await asyncio.to_thread(server.stop)
        await eventually(lambda: h.up("jobs") == 0, what="source down")
        assert h.depth("jobs") is None
        assert h.api("jobs")["error"].startswith("Redis connection failed")
        assert h.value("rightsizer_queue_last_success_timestamp_seconds", "jobs") >= first_success
        with contextlib.ExitStack() as stack:
            again = await asyncio.to_thread(stack.enter_context, redis_server(port))
            client(again).rpush("jobs", *range(7))
            await eventually(lambda: h.up("jobs") == 1 and h.depth("jobs") == 7, what="recovery", timeout=20)
            assert h.api("jobs")["error"] is None
            await asyncio.to_thread(stack.close)
