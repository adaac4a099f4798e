"""A refresh's queries reach the engine two at a time (``MAX_CONCURRENT_QUERIES``), still one per
rule and one evidence query: more at once would only share the engine's cores, each running
longer, until all of them passed their deadline together (docs/fleet-scale.md)."""

from __future__ import annotations

import asyncio
import json

from adapter_support import BUILTIN_QUERIES
from aiohttp import web
from aiohttp.test_utils import TestServer

from adapter.cache import Cache
from adapter.config import load_config
from adapter.selfmetrics import AdapterMetrics
from adapter.sources.prometheus import MAX_CONCURRENT_QUERIES, PrometheusSource

EMPTY = {"status": "success", "data": {"resultType": "vector", "result": []}}


async def test_a_refresh_keeps_at_most_two_queries_at_the_engine() -> None:
    in_flight, most, sent = 0, 0, 0

    async def query(request: web.Request) -> web.Response:
        nonlocal in_flight, most, sent
        await request.post()
        in_flight, sent = in_flight + 1, sent + 1
        most = max(most, in_flight)
        await asyncio.sleep(0.05)  # long enough for every waiting query to try
        in_flight -= 1
        return web.Response(text=json.dumps(EMPTY), content_type="application/json")

    app = web.Application()
    app.router.add_post("/api/v1/query", query)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    cfg = load_config(None, {"prometheus": {"url": str(server.make_url(""))}}, environ={})
    source = PrometheusSource(cfg.prometheus, AdapterMetrics())
    await source.start()
    try:
        await Cache(cfg.effective_rules, source, AdapterMetrics()).refresh_once()
    finally:
        await source.close()
        await server.close()
    assert sent == BUILTIN_QUERIES
    assert MAX_CONCURRENT_QUERIES == 2 and most == MAX_CONCURRENT_QUERIES  # never more, and used
