"""Discovery when the kubelet or a page is not what it should be: each fault is one line naming it,
the servers found before keep being polled, and a page that names no server is never polled as one.
In-process, against real HTTP servers on loopback and the real queue extension."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from discovery_rig import PodSpec, pod_list
from queue_fakes import SglangMetrics, VllmMetrics
from queue_servers import FakeHttpServer

from exporter.sources.discovery.extension import Discovery
from exporter.sources.discovery.kubelet import PROBE_LIMIT, KubeletError, KubeletPods
from exporter.sources.discovery.settings import DiscoverySettings
from exporter.sources.pods.settings import PodSettings
from exporter.sources.queues.manager import QueueExtension
from exporter.sources.queues.settings import QueueSettings


def settings(server: FakeHttpServer, **kw: object) -> DiscoverySettings:
    base = DiscoverySettings(
        enabled=True, kubelet_url=server.url("/pods"), bearer_token_file="", timeout_seconds=0.5
    )
    return replace(base, **kw)


@pytest.mark.parametrize(
    ("route", "message"),
    [
        (
            {"status": 403, "body": b"forbidden"},
            "answered 403: the exporter's service account needs get on nodes/pods",
        ),
        ({"status": 500, "body": b"oops"}, "answered HTTP 500"),
        ({"body": b"<html>"}, "did not answer JSON"),
        ({"body": b'{"kind": "Status"}'}, "answered no PodList (no items list)"),
        ({"body": b'{"items": ' + b"[" * 60_000}, "answered JSON nested too deep"),
        (
            {"body": b'{"items": "' + b"x" * 70000 + b'"}'},
            "is larger than 65536 bytes (discovery.max_answer_bytes)",
        ),
        ({"hang": True}, "did not answer within 0.5s"),
    ],
)
async def test_a_kubelet_fault_is_one_line_naming_it(route: dict[str, Any], message: str) -> None:
    with FakeHttpServer() as server:
        server.route("/pods", content_type="application/json", **route)
        client = KubeletPods(settings(server, max_answer_bytes=65536))
        try:
            with pytest.raises(KubeletError) as caught:
                await client.items()
        finally:
            await client.close()
    assert message in str(caught.value) and "\n" not in str(caught.value)


async def test_the_token_is_sent_and_a_missing_token_file_is_a_fault(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc\n")
    with FakeHttpServer() as server:
        server.route("/pods", body=pod_list([]), require={"Authorization": "Bearer abc"})
        client = KubeletPods(settings(server, bearer_token_file=str(token)))
        assert await client.items() == []
        gone = KubeletPods(settings(server, bearer_token_file=str(tmp_path / "nope")))
        with pytest.raises(KubeletError, match=r"cannot read discovery\.bearer_token_file"):
            await gone.items()
        await client.close()
        await gone.close()


@pytest.fixture
async def node() -> AsyncIterator[tuple[FakeHttpServer, QueueExtension]]:
    queues = QueueExtension([], 0.2, dynamic=True)
    await queues.start()
    with FakeHttpServer() as server:
        yield server, queues
    await queues.stop()


def spec(server: FakeHttpServer, name: str, path: str, **kw: Any) -> PodSpec:
    ann = {"prometheus.io/scrape": "true", "prometheus.io/path": path}
    return PodSpec(name, f"uid-{name}", "127.0.0.1", server.port, annotations=ann, **kw)


async def test_servers_are_kept_while_the_pod_list_fails_and_dropped_when_their_pod_goes(
    node: tuple[FakeHttpServer, QueueExtension],
) -> None:
    server, queues = node
    vllm, sglang = VllmMetrics(), SglangMetrics()
    vllm.set([4.0], [1.0])
    sglang.set(6, 1)
    server.route("/vllm", body=vllm.render)
    server.route("/sglang", body=sglang.render)
    server.route("/node-exporter", body=b"# TYPE node_load1 gauge\nnode_load1 0.5\n")
    pods = [
        spec(server, "a", "/vllm", image="vllm/vllm-openai:v0.8.5"),
        spec(server, "b", "/sglang"),  # kind from its page
        spec(server, "c", "/node-exporter"),  # annotated, not an inference server
    ]
    route = server.route("/pods", body=lambda: pod_list(pods), content_type="application/json")
    clash = QueueSettings(name="prod/c", kind="prometheus", url="http://127.0.0.9:9/x", metric="x")  # not c
    found = Discovery(settings(server), PodSettings(socket="/nonexistent/kubelet.sock"), queues, [clash])
    await found.refresh()
    view = found._api
    assert (
        view["ok"]
        and view["gpu_links"] == "none"
        and "no kubelet pod-resources socket" in view["gpu_problem"]
    )
    assert {s["queue"]: s["kind"] for s in view["servers"]} == {"prod/a": "vllm", "prod/b": "sglang"}
    assert view["skipped"] == [
        {
            "pod": "prod/c",
            "reason": "kind unknown (its page is not an inference server's): set rightsizer.io/kind",
        }
    ]
    assert [p.name for p in queues.pollers] == ["prod/a", "prod/b"]
    first = queues.pollers[0]

    # published with their first poll, as static sources are at start: never a replica missing
    # from the sum for a cycle
    assert all(p.outcome is not None and p.outcome.up for p in queues.pollers)
    depth = {p.name: p.outcome.value.depth for p in queues.pollers if p.outcome and p.outcome.value}
    assert depth == {"prod/a": 4.0, "prod/b": 6.0}

    route.status, route.body = 500, b"kubelet restarting"
    await found.refresh()
    assert found._status.success is False and "answered HTTP 500" in (found._status.error or "")
    assert queues.pollers[0] is first and len(queues.pollers) == 2  # kept, not restarted
    assert [s["queue"] for s in found._api["servers"]] == ["prod/a", "prod/b"]

    route.status = 200
    route.body = lambda: pod_list(pods[1:])  # pod a is gone
    await found.refresh()
    assert [p.name for p in queues.pollers] == ["prod/b"] and found._status.success
    contribution = queues.contribute(None, ())  # type: ignore[arg-type]
    assert [dict(r.labels)["queue"] for r in contribution.rows["rightsizer_queue_source_up"]] == ["prod/b"]
    assert json.dumps(found._api)  # the API view is plain JSON
    await found.stop()


async def test_a_page_is_read_no_further_than_the_probe_limit() -> None:
    junk = b"".join(b'node_cpu_seconds_total{cpu="%d"} 1\n' % i for i in range(200_000))  # ~7 MiB
    with FakeHttpServer() as server:
        server.route("/late", body=junk + b"vllm:num_requests_waiting 1\n")
        server.route(
            "/chunked", body=b"# HELP x\n" + b"y 1\n" * 30000 + b"sglang:num_queue_reqs 2\n", chunked=True
        )
        client = KubeletPods(settings(server, timeout_seconds=5.0))
        assert len(junk) > PROBE_LIMIT
        assert await client.probe(server.url("/late")) is None  # named past the limit: not a server
        assert await client.probe(server.url("/chunked")) == "sglang"
        with pytest.raises(KubeletError, match="answered HTTP 404"):
            await client.probe(server.url("/nothing"))
        await client.close()
