"""A fake Thanos Query over real Prometheus servers, answering in Thanos's exact JSON.

Thanos Query evaluates PromQL over the union of its stores' series; with a store unavailable it
answers from the others and, partial responses being on by default, says so only in ``warnings``
(``pkg/api/api.go``: ``{"status":"success","data":{...},"warnings":["..."]}``); asked
``partial_response=false`` it refuses instead (HTTP 422, ``errorType`` ``execution``, the store's
error). Here ``everything`` is a Prometheus scraping every node (the union of both stores) and
``without_b`` one scraping node a only (the union with store B missing); the query is passed on
to the one that matches the stores' state, and its answer wrapped as Thanos would.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.parse
import urllib.request
from typing import Any

from aiohttp import web

STORE_B_ERROR = (
    'receive series from Addr: 127.0.0.1:10902 LabelSets: {store="b"} MinTime: 0 MaxTime: '
    "9223372036854775807: rpc error: code = Unavailable desc = connection error: desc = "
    '"transport: Error while dialing: dial tcp 127.0.0.1:10902: connect: connection refused"'
)


class FakeThanosQuery:
    def __init__(self, everything: str, without_b: str) -> None:
        self.everything, self.without_b = everything, without_b
        self.store_b_up = True
        self.honours_partial_response = True
        self.forms: list[dict[str, str]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.url = ""

    def _ask(self, base: str, form: dict[str, str]) -> tuple[int, Any]:
        body = urllib.parse.urlencode({"query": form["query"]}).encode()
        request = urllib.request.Request(f"{base}/api/v1/query", data=body, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    async def _query(self, request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        self.forms.append(form)
        if self.store_b_up:
            code, body = await asyncio.to_thread(self._ask, self.everything, form)
            return web.json_response(body, status=code)
        partial = form.get("partial_response", "true").lower() not in ("false", "0")
        if not partial and self.honours_partial_response:
            return web.json_response({"status": "error", "errorType": "execution", "error": STORE_B_ERROR},
                                     status=422)  # fmt: skip
        code, body = await asyncio.to_thread(self._ask, self.without_b, form)
        if code == 200:
            body["warnings"] = [STORE_B_ERROR]
        return web.json_response(body, status=code)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/api/v1/query", self._query)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    def __enter__(self) -> FakeThanosQuery:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._runner is not None
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
