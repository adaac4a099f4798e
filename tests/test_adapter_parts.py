"""Prometheus mode against a fake query API: the source-state parts' carriers and their failures,
the bounds on each part, and answers that are partial.

- A rule's parts ride in its own query and the targets' health in one evidence query per
  refresh: a rule whose query fails fails alone, nothing is asked again within the refresh, and
  the other rules still tell up from down.
- A Prometheus failing every query gets one query per refresh: the evidence query, which every
  rule with a source family awaits.
- ``max_series_per_rule`` bounds the values and each part alone.
- Partial answers are refused (503) whatever the engine: Thanos Query's ``warnings`` (its exact
  JSON: ``{"status":"success","data":{...},"warnings":[...]}``), VictoriaMetrics cluster's
  ``"isPartial":true``; and the adapter asks for complete answers (``partial_response=false``,
  ``deny_partial_response=1``) and sends no ``time``, so the engine's clock decides.
"""

from __future__ import annotations

from typing import Any

import pytest
from adapter_support import BUILTIN_QUERIES, assert_status, client_get
from prom_parts import NOW, TARGET, carried, healthy
from test_adapter_prometheus import FakePrometheus, cache_for, prom, vector

from adapter.keda.metrics_api import MetricsApiAuth
from adapter.kubernetes.gate import Gate
from adapter.selfmetrics import AdapterMetrics
from adapter.server import create_app
from adapter.sources.source_states import MARKER

__all__ = ["prom"]

UP_FAMILY = "rightsizer_queue_source_up"
JOBS, CHAT = {"queue": "jobs", "namespace": "prod"}, {"queue": "chat", "namespace": "prod"}
IN_FLIGHT = "/apis/external.metrics.k8s.io/v1beta1/namespaces/prod/rightsizer_queue_in_flight"
GPU_BUSY = "/apis/external.metrics.k8s.io/v1beta1/namespaces/prod/rightsizer_gpu_busy"


def own(query: str) -> str:
    """The rule's own query, without the parts it carries."""
    return query.split(" or label_replace(")[0]


def queues_answer(failing: str | None = None) -> Any:
    """jobs up with 2 in flight, chat's source down; ``failing``: a query text whose carrier fails."""
    up = healthy({UP_FAMILY: [JOBS, CHAT]})

    def provide(name: str, family: str) -> list[tuple[dict[str, str], str]]:
        found = up(name, family)
        return [(labels, "0" if name == "cur" and labels["queue"] == "chat" else v) for labels, v in found]

    def answer(query: str) -> tuple[int, Any]:
        if failing is not None and failing in own(query) and MARKER in query:
            return 422, {"status": "error", "errorType": "bad_data", "error": "parse error"}
        values = [(JOBS, "2")] if "rightsizer_queue_in_flight{" in own(query) else []
        if MARKER not in query:  # a part asked alone: its own series, unmarked
            return vector([(dict((k, v) for k, v in labels.items() if k != MARKER), value)
                           for labels, value in carried(f'{query} or label_replace({query}, "{MARKER}", "p0"',
                                                        provide)] or values)  # fmt: skip
        return vector(values + carried(query, provide))

    return answer


async def test_a_failed_rule_query_fails_that_rule_alone_and_costs_no_extra_query(
    prom: FakePrometheus, aiohttp_client: Any
) -> None:
    prom.answer = queues_answer(failing="rightsizer_queue_depth{")
    cache, source, cfg = await cache_for(prom)
    await cache.refresh_once()
    depth_carried = [q for q in prom.queries if "rightsizer_queue_depth{" in own(q)]
    assert len(depth_carried) == 1 and MARKER in depth_carried[0]
    assert len(prom.queries) == BUILTIN_QUERIES  # the rules' and the evidence query, none again
    assert "HTTP 422: bad_data: parse error" in (cache.states["rightsizer_queue_depth"].error or "")
    app = create_app(cache, Gate.off(), AdapterMetrics(), MetricsApiAuth(cfg.metrics_api))
    client = await aiohttp_client(app)
    code, body = await client_get(client, f"{IN_FLIGHT}?labelSelector=queue%3Djobs")
    assert code == 200 and [i["value"] for i in body["items"]] == ["2"], body
    down = await client_get(client, f"{IN_FLIGHT}?labelSelector=queue%3Dchat")
    assert_status(down, 503, "ServiceUnavailable")
    assert "source down" in down[1]["message"]
    assert_status(await client_get(client, f"{IN_FLIGHT}?labelSelector=queue%3Dghost"), 404, "NotFound")
    await source.close()


async def test_a_failed_evidence_query_fails_every_rule_with_sources_and_costs_no_query_more(
    prom: FakePrometheus,
) -> None:
    prom.answer = lambda query: (503, "unavailable")
    cache, source, _ = await cache_for(prom)
    await cache.refresh_once()
    assert len(prom.queries) == 1  # the evidence query failed: no rule with a source family asks
    assert all(
        "the source evidence query failed: prometheus answered HTTP 503" in (state.error or "")
        for state in cache.states.values()
    ), cache.states
    await cache.refresh_once()
    assert len(prom.queries) == 2  # tried again at the next refresh, not before
    await source.close()


async def test_max_series_per_rule_bounds_values_and_each_part(prom: FakePrometheus) -> None:
    queues = [{"queue": f"q{i}", "namespace": "prod"} for i in range(3)]
    for shown, values, error in (
        (2, 2, None),
        (3, 2, "3 series of source-state part p0, more than max_series_per_rule (2)"),
        (2, 3, "3 series, more than max_series_per_rule (2)"),
    ):
        provide = healthy({UP_FAMILY: queues[:shown]})
        prom.answer = lambda q, provide=provide, values=values: vector(
            ([(labels, "1") for labels in queues[:values]] if "rightsizer_queue_depth{" in own(q) else [])
            + carried(q, provide)
        )
        cache, source, _ = await cache_for(prom, max_series_per_rule=2)
        await cache.refresh_once()
        depth = cache.states["rightsizer_queue_depth"]
        if error is None:
            assert depth.error is None and depth.vector is not None and depth.sources is not None
            assert (len(depth.vector), len(depth.sources)) == (2, 2)
            assert all(MARKER not in s.labels for s in depth.sources.series)
        else:
            assert error in (depth.error or ""), depth.error
        await source.close()


STORE_B = (
    'receive series from Addr: 10.0.3.7:10901 LabelSets: {prometheus="b"} MinTime: 1700000000000 '
    'MaxTime: 9223372036854775807: rpc error: code = Unavailable desc = connection error: desc = '
    '"transport: Error while dialing: dial tcp 10.0.3.7:10901: connect: connection refused"'
)
POD_A = {"namespace": "prod", "pod": "worker-7d9c5b6f8b-x2x4z", "container": "srv", "UUID": "GPU-a"}
POD_B = {"namespace": "prod", "pod": "worker-7d9c5b6f8b-q9q9q", "container": "srv", "UUID": "GPU-b"}


def store_b_down(form: dict[str, str], query: str, engine: str) -> tuple[int, Any]:
    """What Thanos Query (``engine`` thanos) or vmselect (``vm``) answers with the store holding
    node b unavailable: complete answers refused when asked so, else node a's half, marked partial."""
    if engine == "thanos" and form.get("partial_response") == "false":
        return 422, {"status": "error", "errorType": "execution", "error": STORE_B}
    if engine == "vm" and form.get("deny_partial_response") == "1":
        why = "cannot fetch query results from vmstorage nodes: cannot obtain data from vmstorage-1:8401"
        return 422, {"status": "error", "errorType": "422", "error": why}
    half = healthy({"rightsizer_gpu_verdict": [{**POD_A, "verdict": "idle"}]})
    values = [(POD_A, "0")] if "rightsizer_gpu_verdict{" in own(query) else []
    code, body = vector(values + carried(query, half))
    body = {**body, "warnings": [STORE_B]} if engine == "thanos" else {**body, "isPartial": True}
    return code, body


@pytest.mark.parametrize("engine", ["thanos", "vm"])
@pytest.mark.parametrize("honours_the_switch", [True, False], ids=["asked-complete", "partial-anyway"])
async def test_partial_answers_are_refused(
    prom: FakePrometheus, aiohttp_client: Any, engine: str, honours_the_switch: bool
) -> None:
    """Pod a idle (0), pod b busy (1) on the store that is down: never gpu_busy 0 for the workload."""
    prom.answer = lambda q: store_b_down(prom.forms[-1] if honours_the_switch else {}, q, engine)
    cache, source, cfg = await cache_for(prom)
    await cache.refresh_once()
    assert prom.forms and all(
        f.get("partial_response") == "false" and f.get("deny_partial_response") == "1" and "time" not in f
        for f in prom.forms
    )
    app = create_app(cache, Gate.off(), AdapterMetrics(), MetricsApiAuth(cfg.metrics_api))
    client = await aiohttp_client(app)
    for selector in ("workload%3Dworker", f"pod%3D{POD_A['pod']}"):
        code, body = await client_get(client, f"{GPU_BUSY}?labelSelector={selector}")
        assert_status((code, body), 503, "ServiceUnavailable")
        expected = {
            ("thanos", True): f"HTTP 422: execution: {STORE_B[:40]}",
            ("thanos", False): f"the answer is partial, so it is not used: warning: {STORE_B[:40]}",
            ("vm", True): "HTTP 422: 422: cannot fetch query results from vmstorage nodes",
            ("vm", False): "the answer is partial, so it is not used: isPartial is true",
        }[engine, honours_the_switch]
        assert expected in body["message"], body["message"]
    await source.close()


def never_reached_beside_a_nan_flag(query: str) -> tuple[int, Any]:
    """Job ``rightsizer``: node a up, its one queue's flag NaN (garbage, no value); node b failing
    and never scraped successfully within the horizon, so it might publish anything."""
    b = {**TARGET, "instance": "node-b:9400"}

    def provide(name: str, family: str) -> list[tuple[dict[str, str], str]]:
        return {
            "up": [(TARGET, "1"), (b, "0")],
            "up_at": [(TARGET, str(NOW - 1)), (b, str(NOW - 1))],
            "healthy_at": [(TARGET, str(NOW - 1))],
            "stamped": [(TARGET, "1")],
            "scrapes": [({"job": TARGET["job"]}, "120")],
            "cur": [({**JOBS, **TARGET}, "NaN")] if family == UP_FAMILY else [],
            "jobs": [({"job": TARGET["job"]}, "1")] if family == UP_FAMILY else [],
        }.get(name, [])

    values = [(JOBS, "3")] if "rightsizer_queue_depth{" in own(query) else []
    return vector(values + carried(query, provide))


async def test_a_flag_rule_reads_its_jobs_from_its_flags_and_no_nan_hides_one(
    prom: FakePrometheus, aiohttp_client: Any
) -> None:
    """A rule with a flag asks no part reading its family once more for the jobs publishing it
    (at 40,000 GPUs such a part cost about a tenth of a queue rule's parts): its flags now are every
    series of the family. A NaN flag is no value, but its job still publishes the family, so node b,
    never reached, makes every answer of the rule unknown (503), never a value or a 404."""
    prom.answer = never_reached_beside_a_nan_flag
    cache, source, cfg = await cache_for(prom)
    await cache.refresh_once()
    flagged = [q for q in prom.queries if f"{UP_FAMILY}{{" in q and MARKER in q]
    assert len(flagged) == 2 and not any("count by" in q for q in flagged), flagged
    app = create_app(cache, Gate.off(), AdapterMetrics(), MetricsApiAuth(cfg.metrics_api))
    client = await aiohttp_client(app)
    depth = "/apis/external.metrics.k8s.io/v1beta1/namespaces/prod/rightsizer_queue_depth"
    for selector in ("queue%3Djobs", "queue%3Dghost"):
        code, body = await client_get(client, f"{depth}?labelSelector={selector}")
        assert_status((code, body), 503, "ServiceUnavailable")
        assert "node-b:9400 (job rightsizer) has not been scraped successfully" in body["message"], body
    await source.close()
