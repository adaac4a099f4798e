"""Rules nobody asks for cost the engine nothing (``prometheus.rule_idle_seconds``, adapter/cache.py).

Against a real HTTP server speaking the query API, with the rule idle time shortened to a second:

- every rule is refreshed at first (one query each, the idle and busy pair one, and the evidence
  query), whatever is asked;
- once the idle time has passed, a refresh asks only the rules that requests asked for (the queue
  depth: its query and the evidence query, nothing else);
- an idle rule has no values: asked for, it is answered 503 naming why (never its old value, never
  0), its self-metrics say idle rather than down, and the request wakes the refresher at once (a
  refresh interval of a minute is not waited for); the refresh that follows gives it values again;
- ``rule_idle_seconds: 0`` refreshes every rule always.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from adapter_support import BUILTIN_QUERIES, assert_status, client_get
from prom_parts import carried, healthy
from prometheus_client import generate_latest
from test_adapter_prometheus import EXT, FakePrometheus, cache_for, prom, vector  # noqa: F401  (fixture)

from adapter.cache import Cache
from adapter.keda.metrics_api import MetricsApiAuth
from adapter.kubernetes.gate import Gate
from adapter.selfmetrics import AdapterMetrics
from adapter.server import create_app
from adapter.sources.prometheus import PrometheusSource

IDLE = 1.0  # seconds
QUEUES = [({"queue": f"q{i}", "namespace": "prod"}, str(i)) for i in range(3)]
DEPTH, IN_FLIGHT = "rightsizer_queue_depth", "rightsizer_queue_in_flight"


def answering(fake: FakePrometheus) -> None:
    """Three queues, their source up and current: depth i and i + 10 in flight for queue qi."""
    provide = healthy({"rightsizer_queue_source_up": [labels for labels, _ in QUEUES]})

    def answer(query: str) -> Any:
        own = query.split(" or label_replace(")[0]
        if f"{DEPTH}{{" in own:
            return vector(QUEUES + carried(query, provide))
        if f"{IN_FLIGHT}{{" in own:
            return vector([(labels, str(int(v) + 10)) for labels, v in QUEUES] + carried(query, provide))
        return vector(carried(query, provide))

    fake.answer = answer


async def ask(client: Any, metric: str, queue: str) -> tuple[int, Any]:
    return await client_get(client, f"{EXT}/prod/{metric}?labelSelector=queue%3D{queue}")


async def idle_adapter(fake: FakePrometheus, aiohttp_client: Any) -> tuple[Cache, PrometheusSource, Any]:
    """The adapter on ``fake`` (three queues) and a client of its APIs; rules idle after ``IDLE``
    seconds, refreshed every minute unless woken."""
    answering(fake)
    cache, source, cfg = await cache_for(fake, rule_idle_seconds=IDLE, refresh_interval_seconds=60)
    app = create_app(cache, Gate.off(), AdapterMetrics(), MetricsApiAuth(cfg.metrics_api))
    return cache, source, await aiohttp_client(app)


def own_metrics(cache: Cache) -> str:
    return generate_latest(cache.metrics.registry).decode()


async def test_rules_nobody_asks_for_are_not_refreshed_until_asked(
    prom: FakePrometheus,  # noqa: F811
    aiohttp_client: Any,
) -> None:
    cache, source, client = await idle_adapter(prom, aiohttp_client)
    await cache.refresh_once()
    assert len(prom.queries) == BUILTIN_QUERIES  # every rule at first, nothing asked yet
    code, body = await ask(client, IN_FLIGHT, "q2")
    assert code == 200 and [i["value"] for i in body["items"]] == ["12"], body

    # only the queue depth is asked for, as an HPA would, for longer than the idle time
    for _ in range(int(IDLE / 0.1) + 3):
        code, body = await ask(client, DEPTH, "q1")
        assert code == 200 and [i["value"] for i in body["items"]] == ["1"], body
        await asyncio.sleep(0.1)
    sent = len(prom.queries)
    await cache.refresh_once()
    asked = prom.queries[sent:]
    assert len(asked) == 2, asked  # the queue depth's query and the evidence query, no other rule's
    assert sum(f"{DEPTH}{{" in q.split(" or label_replace(")[0] for q in asked) == 1
    assert cache.idle == frozenset(cache.rules) - {DEPTH}
    code, body = await ask(client, DEPTH, "q1")
    assert code == 200 and [i["value"] for i in body["items"]] == ["1"], body

    # idle is neither down nor a value: no rule_up (no alert fires), an idle flag instead
    text = own_metrics(cache)
    assert f'rightsizer_adapter_rule_idle{{rule="{IN_FLIGHT}"}} 1.0' in text
    assert f'rightsizer_adapter_rule_idle{{rule="{DEPTH}"}} 0.0' in text
    assert f'rightsizer_adapter_rule_up{{rule="{DEPTH}"}} 1.0' in text
    none = rf'rightsizer_adapter_(rule_up|cache_age_seconds|rule_series)\{{rule="{IN_FLIGHT}"'
    assert not re.search(none, text)

    # asked for, an idle rule is unknown (503 naming why, never its old 12), and refreshed at once
    assert not cache.wake.is_set()
    down = await ask(client, IN_FLIGHT, "q2")
    assert_status(down, 503, "ServiceUnavailable")
    assert "no request asked for this metric in the last 1 s" in down[1]["message"], down
    assert cache.wake.is_set()
    sent = len(prom.queries)
    await cache.refresh_once()
    assert len(prom.queries) - sent == 3  # depth, in flight and the evidence query
    code, body = await ask(client, IN_FLIGHT, "q2")
    assert code == 200 and [i["value"] for i in body["items"]] == ["12"], body
    assert IN_FLIGHT not in cache.idle
    await source.close()


async def test_asking_an_idle_rule_wakes_the_refresher(
    prom: FakePrometheus,  # noqa: F811
    aiohttp_client: Any,
) -> None:
    cache, source, client = await idle_adapter(prom, aiohttp_client)
    runner = asyncio.create_task(cache.run())
    try:
        while cache.generation < 1:
            await asyncio.sleep(0.05)
        await asyncio.sleep(IDLE + 0.1)
        await cache.refresh_once()  # nothing was asked: every rule idle, no query but none needed
        assert cache.idle == frozenset(cache.rules)
        generation = cache.generation
        assert (await ask(client, DEPTH, "q0"))[0] == 503
        # the run loop sleeps for the minute of its interval unless woken
        async with asyncio.timeout(30):
            while cache.generation == generation:
                await asyncio.sleep(0.05)
        code, body = await ask(client, DEPTH, "q0")
        assert code == 200 and [i["value"] for i in body["items"]] == ["0"], body
    finally:
        cache.stop()
        runner.cancel()
        await source.close()


async def test_rule_idle_seconds_0_refreshes_every_rule(prom: FakePrometheus) -> None:  # noqa: F811
    answering(prom)
    cache, source, _ = await cache_for(prom, rule_idle_seconds=0)
    await cache.refresh_once()
    await asyncio.sleep(0.2)
    await cache.refresh_once()
    assert len(prom.queries) == 2 * BUILTIN_QUERIES and not cache.idle
    await source.close()
