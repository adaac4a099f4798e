"""``rightsizer_gpu_idle`` and ``rightsizer_gpu_busy`` from one query, on both real engines.

The two rules read the same series (the idle verdicts): idle is ``max by (K) (F)``, busy
``max by (K) (1 - F)``. They are asked as one ``count_values`` query (adapter/sources/flagpairs.py).
A real Prometheus and a real VictoriaMetrics hold ten minutes of three exporters' idle verdicts.
What each GPU must get, written from the two definitions before running:

- GPU-idle, one exporter, 1: idle 1, busy 0;
- GPU-busy, one exporter, 0: idle 0, busy 1;
- GPU-rollout, published by node-a (1) and node-b (0), as during a DaemonSet rollout: idle 1
  (the largest), busy 1 (one minus the smallest);
- GPU-odd, 0.25 on node-a and 0.75 on node-b (a value that is no flag is still a number): idle
  0.75, busy 0.75;
- GPU-nan, NaN on node-c: no number for either rule; the request is refused (503) naming NaN;
- GPU-mixed, 1 on node-a and NaN on node-c: refused the same way (the engines' own ``max`` would
  skip the NaN; a key with a value that is not a number is garbage, never served in part).

VictoriaMetrics drops NaN samples when it ingests them, so there GPU-nan has no series (404) and
GPU-mixed is node-a's alone (idle 1, busy 0); the test asks the engine which it holds.

Each rule's values must also equal what its own query gives asked alone, on the keys without NaN.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import generate_latest
from report_history import Samples, engine_fixture

from adapter.cache import Cache
from adapter.config import load_config
from adapter.kubernetes.answers import external
from adapter.promql import render
from adapter.rules import BUILTIN_RULES, RuleConfig
from adapter.selfmetrics import AdapterMetrics
from adapter.sources.flagpairs import FLAG_VALUES, flag_pairs
from adapter.sources.prometheus import PrometheusSource
from adapter.vectors import add_workload
from rightsizer_core.settings import build

STEP, SPAN = 15.0, 600.0
VALUES = {  # node -> (GPU, its idle verdict)
    "node-a": [("GPU-idle", 1.0), ("GPU-rollout", 1.0), ("GPU-odd", 0.25), ("GPU-mixed", 1.0)],
    "node-b": [("GPU-busy", 0.0), ("GPU-rollout", 0.0), ("GPU-odd", 0.75)],
    "node-c": [("GPU-nan", float("nan")), ("GPU-mixed", float("nan"))],
}
EXPECTED = {  # GPU -> (idle, busy), as external metrics' quantities
    "GPU-idle": ("1", "0"), "GPU-busy": ("0", "1"), "GPU-rollout": ("1", "1"), "GPU-odd": ("750m", "750m"),
}  # fmt: skip
REFUSED = ("GPU-nan", "GPU-mixed")


def pod(uuid: str) -> str:
    return f"worker-5d8f7c9b6d-{uuid[4:].lower()}"


def history(end: float) -> dict[str, list[str]]:
    out = Samples()
    for k in range(int(SPAN / STEP) + 1):
        t = end - SPAN + k * STEP
        for node, gpus in VALUES.items():
            target = f'instance="{node}:9400",job="rightsizer"'
            out.healthy(target, t)
            for uuid, idle in gpus:
                key = f'namespace="prod",pod="{pod(uuid)}",container="srv",UUID="{uuid}",gpu="0"'
                for verdict in ("idle", "rightsized"):  # only the idle series are read
                    value = idle if verdict == "idle" else 1.0 - idle
                    out.add("rightsizer_gpu_verdict", f'{target},{key},verdict="{verdict}"', value, t)
    return out.families


engine = engine_fixture(history)


@pytest.fixture
async def cache(engine: str) -> AsyncIterator[tuple[Cache, PrometheusSource]]:
    cfg = load_config(None, {"prometheus": {"url": engine, "stale_after_seconds": 600}}, environ={})
    metrics = AdapterMetrics()
    source = PrometheusSource(cfg.prometheus, metrics)
    await source.start()
    try:
        yield Cache(cfg.effective_rules, source, metrics), source
    finally:
        await source.close()


def answer(cache: Cache, rule: str, uuid: str) -> tuple[int, Any]:
    code, body = external(cache, rule, "prod", {"labelSelector": f"UUID={uuid}"})
    data = json.loads(body)
    return code, [i["value"] for i in data["items"]] if code == 200 else data["message"]


async def test_idle_and_busy_come_from_one_query_with_each_rules_own_values(
    cache: tuple[Cache, PrometheusSource],
) -> None:
    adapter, source = cache
    await adapter.refresh_once()
    text = generate_latest(adapter.metrics.registry).decode()
    sent = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith('rightsizer_adapter_upstream_queries_total{outcome="success"')
    )
    assert sent == len(BUILTIN_RULES) - 1 + 1  # the pair's one query, and the evidence query
    for uuid, (idle, busy) in EXPECTED.items():
        assert answer(adapter, "rightsizer_gpu_idle", uuid) == (200, [idle]), uuid
        assert answer(adapter, "rightsizer_gpu_busy", uuid) == (200, [busy]), uuid
    # VictoriaMetrics drops NaN samples as it ingests them (only Prometheus holds them): there,
    # GPU-nan has no series and GPU-mixed node-a's alone
    held, _, nan = await source.query('rightsizer_gpu_verdict{verdict="idle",UUID="GPU-nan"}')
    if held or nan:
        for uuid in REFUSED:
            for rule in ("rightsizer_gpu_idle", "rightsizer_gpu_busy"):
                code, message = answer(adapter, rule, uuid)
                assert code == 503 and "NaN" in message, (rule, uuid, message)
    else:
        assert answer(adapter, "rightsizer_gpu_idle", "GPU-nan")[0] == 404
        assert answer(adapter, "rightsizer_gpu_idle", "GPU-mixed") == (200, ["1"])
        assert answer(adapter, "rightsizer_gpu_busy", "GPU-mixed") == (200, ["0"])
    for name in ("rightsizer_gpu_idle", "rightsizer_gpu_busy"):  # each rule's own query, asked alone
        rule = adapter.rules[name]
        assert rule.query is not None
        alone, _, _ = await source.query(render(rule.query, rule.matchers))
        alone = add_workload(alone)
        vector = adapter.states[name].vector
        assert vector is not None
        mine = {(frozenset(s.labels.items()), s.value) for s in vector.series if s.labels["UUID"] in EXPECTED}
        own = {(frozenset(s.labels.items()), s.value) for s in alone if s.labels["UUID"] in EXPECTED}
        assert mine == own and len(mine) == len(EXPECTED), name


def test_only_rules_asking_exactly_flag_and_complement_share() -> None:
    idle = next(r for r in BUILTIN_RULES if r.name == "rightsizer_gpu_idle")
    busy = next(r for r in BUILTIN_RULES if r.name == "rightsizer_gpu_busy")
    [pair] = flag_pairs(BUILTIN_RULES)
    assert (pair.flag, pair.complement) == (idle, busy)
    assert pair.query == (
        f'count_values by (namespace, pod, container, UUID) ("{FLAG_VALUES}", '
        "rightsizer_gpu_verdict{<<.LabelMatchers>>})"
    )

    def user(name: str, query: str, match: list[str] | None = None) -> Any:
        data = {"name": name, "query": query, "source_family": "rightsizer_gpu_verdict",
                "workload_from_pod": True, "match": match if match is not None else idle.match}  # fmt: skip
        return build(RuleConfig, data, f"rule {name}")

    keys = "namespace, pod, container, UUID"
    other = user(
        "other", f"max by ({keys}) (rightsizer_gpu_verdict{{<<.LabelMatchers>>}})", ['verdict="busy"']
    )
    scaled = user("scaled", f"max by ({keys}) (1 - rightsizer_gpu_verdict{{<<.LabelMatchers>>}}) * 100")
    assert flag_pairs([idle, other, scaled]) == []  # other matchers; a scale: each asks its own
    assert flag_pairs([busy]) == [] and flag_pairs([idle]) == []
    copy = user("copy", f"max by ({keys}) (1 - rightsizer_gpu_verdict{{<<.LabelMatchers>>}})")
    assert [(p.flag.name, p.complement.name) for p in flag_pairs([idle, copy])] == [
        ("rightsizer_gpu_idle", "copy")
    ]
