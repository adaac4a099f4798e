"""Pods queries select pods by their Kubernetes labels, listed from an API server speaking the real
wire protocol (PodList / PartialObjectMetadataList, paging with ``continue``, bearer token)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from adapter_support import Make, assert_status, client_get, make
from aiohttp import web
from aiohttp.test_utils import TestServer

__all__ = ["make"]  # the fixture
PODS = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/prod/pods/*/rightsizer_gpu_utilization_ratio"
POD_LABELS = {
    "chat-7d9c5b6f8b-x2x4z": {"app": "chat", "app.kubernetes.io/name": "chat", "track": "stable"},
    "chat-7d9c5b6f8b-q9q9q": {"app": "chat", "track": "canary"},
    "other-0": {"app": "other"},
}


class FakeApiServer:
    """``GET /api/v1/namespaces/{ns}/pods`` with paging; records every request."""

    def __init__(self) -> None:
        self.requests: list[web.Request] = []
        self.status = 200
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/{namespace}/pods", self._list)
        self.server = TestServer(app, host="127.0.0.1")

    async def _list(self, request: web.Request) -> web.Response:
        self.requests.append(request)
        if request.headers.get("Authorization") != "Bearer sa-token":
            return web.json_response({"kind": "Status", "code": 401, "message": "Unauthorized"}, status=401)
        if self.status != 200:
            return web.json_response(
                {"kind": "Status", "code": self.status, "message": "forbidden"}, status=self.status
            )
        names = sorted(POD_LABELS) if request.match_info["namespace"] == "prod" else []
        start = int(request.query.get("continue", "0"))
        page = names[start : start + 2]
        more = str(start + 2) if start + 2 < len(names) else ""
        items = [{"metadata": {"name": n, "namespace": "prod", "labels": POD_LABELS[n]}} for n in page]
        return web.json_response(
            {
                "kind": "PartialObjectMetadataList",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": {"resourceVersion": "7", "continue": more},
                "items": items,
            }
        )


@pytest.fixture
async def api() -> AsyncIterator[FakeApiServer]:
    fake = FakeApiServer()
    await fake.server.start_server()
    yield fake
    await fake.server.close()


async def with_api(make: Make, api: FakeApiServer, tmp_path: Path) -> Any:
    (tmp_path / "token").write_text("sa-token\n")
    settings = {
        "pod_labels": "api",
        "api_url": str(api.server.make_url("")),
        "token_file": str(tmp_path / "token"),
    }
    client, _, _ = await make(kubernetes=settings)
    return client


async def names(client: Any, selector: str) -> list[str]:
    code, body = await client_get(client, f"{PODS}?labelSelector={selector}")
    assert code == 200, body
    return sorted(i["describedObject"]["name"] for i in body["items"])


async def test_label_selector_selects_pods_by_their_kubernetes_labels(
    make: Make, api: FakeApiServer, tmp_path: Path
) -> None:
    client = await with_api(make, api, tmp_path)
    assert await names(client, "app%3Dchat") == ["chat-7d9c5b6f8b-q9q9q", "chat-7d9c5b6f8b-x2x4z"]
    assert await names(client, "app%3Dchat,track%21%3Dcanary") == ["chat-7d9c5b6f8b-x2x4z"]
    assert await names(client, "app.kubernetes.io/name%3Dchat") == [
        "chat-7d9c5b6f8b-x2x4z"
    ]  # keys as written
    assert await names(client, "app%3Dother") == []  # a pod with no GPU series
    assert await names(client, "") == ["chat-7d9c5b6f8b-q9q9q", "chat-7d9c5b6f8b-x2x4z"]
    first = api.requests[0]
    assert first.query["limit"] == "500" and "PartialObjectMetadataList" in first.headers["Accept"]
    assert len(api.requests) == 2  # one paged LIST (two pages) for every selector within the TTL


async def test_api_failures_are_503_and_bad_namespaces_never_reach_it(
    make: Make, api: FakeApiServer, tmp_path: Path
) -> None:
    client = await with_api(make, api, tmp_path)
    api.status = 403
    answer = await client_get(client, f"{PODS}?labelSelector=app%3Dchat")
    assert_status(answer, 503, "ServiceUnavailable")
    assert "HTTP 403" in answer[1]["message"]
    before = len(api.requests)
    bad = PODS.replace("/prod/", "/Bad_NS/")
    assert_status(await client_get(client, f"{bad}?labelSelector=app%3Dchat"), 400, "BadRequest")
    assert len(api.requests) == before
