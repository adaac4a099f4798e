"""Source states on both engines: one upstream query per rule per refresh, and every fault told apart.

A real Prometheus and a real VictoriaMetrics hold the same half hour of six exporter pods (``up``,
``rightsizer_last_sample_timestamp_seconds``, queues and GPU utilisation; 15 s apart). What each
request must get, written from the history before running (``stale_after_seconds`` 600, so the
import's own age does not count; the engines' lookback is 5 minutes):

- node-a, up and current: queue ``jobs`` up with 5 items -> 200 "5"; queue ``chat`` whose source
  says down -> 503 "source down"; pod ``worker-..-q9q9q`` at 20 % -> 200 "200m"; pod
  ``worker-..-zzzzz`` left node-a 20 minutes ago while node-a stayed up -> not a source of anything.
- node-b, its scrapes failing (``up`` 0) for 10 minutes, held pod ``worker-..-bbbbb`` at its last good
  scrape -> ``workload=worker`` is 503 naming node-b (never a smaller sum from node-a alone).
- node-c, gone 20 minutes ago (no ``up`` since), held queue ``embed`` at its last good scrape ->
  503 "no current sample"; its pod ``drained-..`` had left it 5 minutes before it went -> 404.
- node-d, up but frozen (its sample time has not moved for 15 minutes) -> its pod is 503 "frozen".
- node-e, gone 10 minutes ago in a DaemonSet rollout, held pod ``serving-..`` to the end; node-f, its
  replacement, publishes the same pod's GPU since -> 200 "400m": the new exporter answers for it.
- A custom-metrics ``pods/*`` answer in ``prod`` serves node-a's pod and the rolled one alone.
- node-a's SLO of workload ``search`` is judged at 0.5 -> 200 "500m"; that of ``chat`` is not ("too
  few requests in the window", as the exporter says it) -> 503 quoting that reason.

Each rule's values and states must equal what its query and its parts give when asked alone.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from adapter_support import assert_status, client_get
from prometheus_client import generate_latest
from report_history import Samples, engine_fixture

from adapter.cache import Cache
from adapter.config import load_config
from adapter.keda.metrics_api import MetricsApiAuth
from adapter.kubernetes.gate import Gate
from adapter.promql import render
from adapter.rules import BUILTIN_RULES
from adapter.selfmetrics import AdapterMetrics
from adapter.server import create_app
from adapter.sources import evidence
from adapter.sources.evidence import classify, problem_instances, rule_parts, target_parts, targets
from adapter.sources.flagpairs import flag_pairs
from adapter.sources.prometheus import PrometheusSource
from adapter.vectors import add_workload

EXT = "/apis/external.metrics.k8s.io/v1beta1/namespaces/prod"
STEP, SPAN = 15.0, 1800.0
A, B, OLD = "worker-5d8f7c9b6d-q9q9q", "worker-5d8f7c9b6d-bbbbb", "worker-5d8f7c9b6d-zzzzz"
DRAINED, FROZEN = "drained-7c9b6d5d8f-ccccc", "frozen-6d5d8f7c9b-ddddd"
ROLLED = "serving-6d5d8f7c9b-rrrrr"
# node -> (gone this many seconds before now (None: still scraped), its stamp frozen since, scraped
# only for this many seconds (None: all along)); node-e and node-f are one node's exporter pod
# before and after a DaemonSet rollout (a new pod: a new instance), 10 minutes ago.
NODES = {"node-a": (None, None, None), "node-b": (None, None, None), "node-c": (1200.0, None, None),
         "node-d": (None, 900.0, None), "node-e": (600.0, None, None), "node-f": (None, None, 600.0)}
UP_SINCE = {"node-b": 600.0}  # up 0 for the last 10 minutes


def history(end: float) -> dict[str, list[str]]:
    out = Samples()
    add = out.add

    for k in range(int(SPAN / STEP) + 1):
        t = end - SPAN + k * STEP
        ago = end - t
        for node, (gone, frozen, since) in NODES.items():
            if (gone is not None and ago < gone) or (since is not None and ago > since):
                continue  # not in service discovery then: no samples at all
            target = f'instance="{node}:9400",job="rightsizer"'
            failing = node in UP_SINCE and ago < UP_SINCE[node]
            add("up", target, 0 if failing else 1, t)
            if failing:
                continue
            stamp = end - frozen if frozen is not None and ago < frozen else t - 0.5
            add("rightsizer_last_sample_timestamp_seconds", target, stamp, t)
            for labels, util, until in GPUS.get(node, ()):
                if ago >= until:
                    add("DCGM_FI_DEV_GPU_UTIL", f'{target},{labels}', util, t)
            for labels, up, depth in QUEUES.get(node, ()):
                add("rightsizer_queue_source_up", f'{target},{labels}', up, t)
                if depth is not None:
                    add("rightsizer_queue_depth", f'{target},{labels}', depth, t)
            for workload, ratio, reason in SLOS.get(node, ()):
                labels = f'{target},namespace="prod",workload="{workload}"'
                add("rightsizer_workload_slo_scaling_up", labels, 0 if reason else 1, t)
                if reason:
                    add("rightsizer_workload_slo_scaling_unjudged_info", f'{labels},reason="{reason}"', 1, t)
                else:
                    add("rightsizer_workload_slo_scaling_latency_ratio", labels, ratio, t)
    return out.families


def gpu(pod: str, uuid: str) -> str:
    return f'namespace="prod",pod="{pod}",container="srv",UUID="{uuid}",gpu="0"'


GPUS = {  # node -> (labels, utilisation %, published until this many seconds before now)
    "node-a": [(gpu(A, "GPU-a"), 20, 0.0), (gpu(OLD, "GPU-a2"), 70, 1200.0)],
    "node-b": [(gpu(B, "GPU-b"), 80, 0.0)],
    "node-c": [(gpu(DRAINED, "GPU-c"), 90, 1500.0)],
    "node-d": [(gpu(FROZEN, "GPU-d"), 50, 0.0)],
    "node-e": [(gpu(ROLLED, "GPU-e"), 40, 0.0)],
    "node-f": [(gpu(ROLLED, "GPU-e"), 40, 0.0)],
}
QUEUES = {  # node -> (labels, source up, depth)
    "node-a": [
        ('queue="jobs",kind="redis",namespace="prod"', 1, 5),
        ('queue="chat",kind="vllm",namespace="prod"', 0, None),
    ],
    "node-c": [('queue="embed",kind="redis",namespace="prod"', 1, 3)],
}

SLOS = {  # node -> (workload, its SLO latency ratio, why it cannot be judged ("": judged))
    "node-a": [("chat", 0.0, "too few requests in the window"), ("search", 0.5, "")],
}


engine = engine_fixture(history)


@pytest.fixture
async def served(engine: str, aiohttp_client: Any) -> AsyncIterator[tuple[Any, Cache, PrometheusSource]]:
    cfg = load_config(None, {"prometheus": {"url": engine, "stale_after_seconds": 600}}, environ={})
    metrics = AdapterMetrics()
    source = PrometheusSource(cfg.prometheus, metrics)
    await source.start()
    cache = Cache(cfg.effective_rules, source, metrics)
    app = create_app(cache, Gate.off(), AdapterMetrics(), MetricsApiAuth(cfg.metrics_api))
    client = await aiohttp_client(app)
    yield client, cache, source
    await source.close()


def counter(cache: Cache, line: str) -> float:
    """The sum of the samples whose line starts with the regex ``line``."""
    text = generate_latest(cache.metrics.registry).decode()
    return sum(float(v) for v in re.findall(rf"^{line}\S* (\S+)$", text, re.M))


def as_set(series: Any) -> set[tuple[frozenset[tuple[str, str]], float]]:
    return {(frozenset(s.labels.items()), s.value) for s in series}


async def test_one_query_per_rule_per_refresh_with_source_states(served: Any) -> None:
    _, cache, source = served
    for _ in range(3):
        await cache.refresh_once()
    assert all(state.error is None for state in cache.states.values()), cache.states
    sent = counter(cache, r'rightsizer_adapter_upstream_queries_total\{outcome="success"')
    failed = counter(cache, r'rightsizer_adapter_upstream_queries_total\{outcome="error"')
    refreshes = counter(cache, "rightsizer_adapter_refreshes_total")
    late = counter(cache, "rightsizer_adapter_upstream_timeouts_total")
    retried = counter(cache, "rightsizer_adapter_upstream_retries_total")
    rules = len(BUILTIN_RULES)
    # one query per rule, but one for gpu_idle and gpu_busy together (the same series: flagpairs.py),
    # and one shared evidence query (the targets' health) per refresh
    assert [(p.flag.name, p.complement.name) for p in flag_pairs(BUILTIN_RULES)] == [
        ("rightsizer_gpu_idle", "rightsizer_gpu_busy")
    ]
    assert (sent, failed, late, retried, refreshes) == (3 * (rules - 1 + 1), 0, 0, 0, 3)
    assert len(cache.rules) == rules
    shared = {name: await source.query(q) for name, q in target_parts(source.horizon).items()}
    known = targets({name: answer[0] for name, answer in shared.items()})
    evidence_at = max(answer[1] for answer in shared.values())
    problems = problem_instances(known, evidence_at, source.horizon)
    # failing (b), gone (c, e) and frozen (d): only their series are timed in the rules' queries
    assert problems == ["node-b:9400", "node-c:9400", "node-d:9400", "node-e:9400"], problems
    for rule in cache.rules.values():  # the split answer is exactly what each query gives alone
        state = cache.states[rule.name]
        assert rule.query is not None and rule.states_family is not None and state.vector is not None
        alone, _, _ = await source.query(render(rule.query, rule.matchers))
        alone = add_workload(alone) if rule.workload_from_pod else alone
        assert as_set(state.vector.series) == as_set(alone), rule.name
        selector = render(f"{rule.states_family}{{<<.LabelMatchers>>}}", rule.matchers)
        asked = rule_parts(rule, selector, source.horizon, problems)
        own = {name: await source.query(q) for name, q in asked.items()}
        parts = {name: answer[0] for name, answer in own.items()}
        now = max(answer[1] for answer in own.values())
        states = classify(rule, parts, known, now, source.horizon)
        states = add_workload(states) if rule.workload_from_pod else states
        assert state.sources is not None and as_set(state.sources.series) == as_set(states), rule.name
        if rule.source_family is not None:  # the values stand for the UP states: node-a's pod sends none
            assert state.up_from_values and not any(s.labels.get("pod") == A for s in state.sources.series)


async def test_every_fault_is_told_apart(served: Any) -> None:
    client, cache, _ = served
    await cache.refresh_once()
    depth = f"{EXT}/rightsizer_queue_depth"
    code, body = await client_get(client, f"{depth}?labelSelector=queue%3Djobs")
    assert code == 200 and [i["value"] for i in body["items"]] == ["5"], body
    down = await client_get(client, f"{depth}?labelSelector=queue%3Dchat")
    assert_status(down, 503, "ServiceUnavailable")
    assert "source down" in down[1]["message"] and "'chat'" in down[1]["message"]
    stale = await client_get(client, f"{depth}?labelSelector=queue%3Dembed")
    assert_status(stale, 503, "ServiceUnavailable")
    message = stale[1]["message"]
    assert "no current sample" in message and "'embed'" in message and "node-c:9400" in message
    assert_status(await client_get(client, f"{depth}?labelSelector=queue%3Dghost"), 404, "NotFound")

    ratio = f"{EXT}/rightsizer_workload_slo_latency_ratio"
    code, body = await client_get(client, f"{ratio}?labelSelector=workload%3Dsearch")
    assert code == 200 and [i["value"] for i in body["items"]] == ["500m"], body
    unjudged = await client_get(client, f"{ratio}?labelSelector=workload%3Dchat")
    assert_status(unjudged, 503, "ServiceUnavailable")  # the exporter's reason, asked in the rule's query
    message = unjudged[1]["message"]
    assert "rightsizer_workload_slo_scaling_up is 0 (too few requests in the window)" in message, message
    assert "node-a:9400" in message

    util = f"{EXT}/rightsizer_gpu_utilization_ratio"
    code, body = await client_get(client, f"{util}?labelSelector=pod%3D{A}")
    assert code == 200 and [i["value"] for i in body["items"]] == ["200m"], body
    worker = await client_get(client, f"{util}?labelSelector=workload%3Dworker")
    assert_status(worker, 503, "ServiceUnavailable")  # never 20 % from node-a alone
    assert "node-b:9400" in worker[1]["message"] and "up 0" in worker[1]["message"]
    assert "node-a" not in worker[1]["message"]  # the pod that left node-a is not a source
    assert_status(await client_get(client, f"{util}?labelSelector=workload%3Ddrained"), 404, "NotFound")
    rolled = await client_get(client, f"{util}?labelSelector=workload%3Dserving")
    assert rolled[0] == 200 and [i["value"] for i in rolled[1]["items"]] == ["400m"], rolled  # from node-f
    frozen = await client_get(client, f"{util}?labelSelector=workload%3Dfrozen")
    assert_status(frozen, 503, "ServiceUnavailable")
    assert "frozen" in frozen[1]["message"] and "node-d:9400" in frozen[1]["message"]
    assert_status(await client_get(client, util), 503, "ServiceUnavailable")  # the whole namespace

    pods = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/prod/pods/*/rightsizer_gpu_utilization_ratio"
    code, body = await client_get(client, pods)
    assert code == 200 and [(i["describedObject"]["name"], i["value"]) for i in body["items"]] == [
        (ROLLED, "400m"),
        (A, "200m"),
    ], body
    one = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/prod/pods/{B}/rightsizer_gpu_utilization_ratio"
    assert_status(await client_get(client, one), 503, "ServiceUnavailable")


async def test_every_fault_is_told_apart_with_every_series_timed(served: Any, monkeypatch: Any) -> None:
    """Past ``MAX_TIMED_TARGETS`` targets that are not current (4 here), the rules ask when every
    series was last seen (the full subquery), and the answers are the same."""
    monkeypatch.setattr(evidence, "MAX_TIMED_TARGETS", 3)
    source = served[2]
    sent: list[str] = []
    post = source._post  # every query a refresh sends goes through it

    async def sending(promql: str, at: float | None = None) -> Any:
        sent.append(promql)
        return await post(promql, at)

    monkeypatch.setattr(source, "_post", sending)
    await test_every_fault_is_told_apart(served)
    timed = [q for q in sent if "max_over_time((present_over_time(DCGM_FI_DEV_GPU_UTIL" in q]
    assert timed and all("instance=~" not in q for q in timed), timed
