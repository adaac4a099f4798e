"""Every expression of deploy/monitoring's rules answers the same on Prometheus and VictoriaMetrics.

Both engines hold the same hour: the exporter's history for the scenario fleets (report_history)
plus a few series the history has no reason to contain (scrape ``up``, a lost GPU, XIDs, the
adapter's cache health), each written so its alert fires for part of the hour and not for the rest.
No rule evaluator runs (neither Prometheus's nor vmalert): each recording and alert expression,
with the recorded series it reads replaced by their own expressions, goes through ``/api/v1/query``
of both engines at several instants, and the answers (label sets and values) must be identical and,
somewhere in the hour, non-empty.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

import pytest
from report_history import ENGINES, HOUR, engines_holding, scenario_hour
from servers import prom_query
from test_rules import all_rules

STEP = 15.0
# Instants (seconds before the history's end) at which every expression is evaluated: between two
# samples, since a sample exactly at the instant may fall either side of it after the engines'
# own rounding of timestamps to milliseconds.
AGO = (-1.0, 307.5, 607.5, 1507.5, 2407.5)


Points = Iterator[tuple[float, float]]


def _series(name: str, labels: dict[str, str], points: Points) -> list[str]:
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return [f"{name}{{{text}}} {value} {t:.3f}" for t, value in points]


def alert_inputs(end: float) -> dict[str, list[str]]:
    """Series for the alerts the history cannot trigger, over the hour before ``end``."""
    times = [end - HOUR + k * STEP for k in range(int(HOUR / STEP) + 1)]

    def until(ago: float) -> Points:  # 1, then 0 for the last ``ago`` seconds
        return ((t, 1.0 if t < end - ago else 0.0) for t in times)

    def counting(values: Any, start: float = HOUR, gap: tuple[float, float] = (0, 0)) -> Points:
        return ((t, values(t)) for t in times if t >= end - start and not end - gap[0] <= t < end - gap[1])

    node = {"Hostname": "node-a", "instance": "node-a:9400"}
    gpu = {**node, "UUID": "GPU-lost", "gpu": "0", "model_name": "NVIDIA L4"}
    xid = {**node, "UUID": "GPU-xid", "gpu": "1"}
    adapter = {"job": "rightsizer-adapter", "instance": "adapter:6443"}
    queue = {**node, "queue": "jobs", "kind": "redis", "namespace": "batch", "workload": "worker"}
    server = {**node, "queue": "chat-q", "kind": "vllm", "namespace": "llm", "workload": "chat-kv"}
    exporters = {"job": "rightsizer-exporter"}
    return {
        "up": [*_series("up", {**exporters, "instance": "node-a:9400"}, until(1200)),
               *_series("up", {**exporters, "instance": "node-b:9400"}, until(-1))],
        "rightsizer_gpu_up": _series("rightsizer_gpu_up", gpu, until(900)),
        "rightsizer_queue_source_up": _series("rightsizer_queue_source_up", queue, until(600)),
        "rightsizer_queue_depth": _series("rightsizer_queue_depth", queue, counting(lambda t: 5.0)),
        # A vLLM whose KV cache is 95 % full and that preempts a request a minute: KV pressure.
        "rightsizer_queue_kv_cache_usage_ratio": _series(
            "rightsizer_queue_kv_cache_usage_ratio", server, counting(lambda t: 0.95)
        ),
        "rightsizer_queue_preemptions_total": _series(
            "rightsizer_queue_preemptions_total", server, counting(lambda t: float((t - (end - HOUR)) // 60))
        ),
        # XID 13 appears 30 min before the end (at 1), then counts a second error 15 min later;
        # XID 79 appears 4 min before the end; XID 48 sits at 3 the whole hour; XID 74 counted 4
        # until the exporter restarted 20 min before the end, then 1 from 18 min before.
        "rightsizer_xid_errors_total": [
            *_series("rightsizer_xid_errors_total", {**xid, "xid": "13"},
                     counting(lambda t: 1.0 if t < end - 900 else 2.0, start=1800)),
            *_series("rightsizer_xid_errors_total", {**xid, "xid": "79"}, counting(lambda t: 1.0, start=240)),
            *_series("rightsizer_xid_errors_total", {**xid, "xid": "48"}, counting(lambda t: 3.0)),
            *_series("rightsizer_xid_errors_total", {**xid, "xid": "74"},
                     counting(lambda t: 4.0 if t < end - 1200 else 1.0, gap=(1200, 1080))),
        ],
        "rightsizer_adapter_cache_age_seconds": [
            *_series("rightsizer_adapter_cache_age_seconds", {**adapter, "rule": "rightsizer_queue_depth"},
                     counting(lambda t: max(1.0, t - (end - 900)))),
            *_series("rightsizer_adapter_cache_age_seconds", {**adapter, "rule": "rightsizer_gpu_idle"},
                     counting(lambda t: 2.0)),
        ],
        "rightsizer_adapter_rule_up": _series("rightsizer_adapter_rule_up", {**adapter, "rule": "busy"},
                                              until(600)),
    }


def inlined(rules: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(rule name, expression) for every rule, recorded series it reads replaced by ``(expr)``."""
    out: list[tuple[str, str]] = []
    recorded: dict[str, str] = {}
    for rule in rules:
        expr = rule["expr"].strip()
        for name, body in recorded.items():
            expr = re.sub(rf"(?<![A-Za-z0-9_:]){re.escape(name)}(?![A-Za-z0-9_:{{])", f"({body})", expr)
        assert not any(re.search(rf"(?<![A-Za-z0-9_:]){re.escape(n)}\b", expr) for n in recorded), expr
        out.append((rule.get("record") or rule["alert"], expr))
        if "record" in rule:
            recorded[rule["record"]] = expr
    return out


EXPRESSIONS = inlined(all_rules())


@pytest.fixture(scope="module")
def engines() -> Iterator[tuple[dict[str, str], float]]:
    """Both engines holding the scenario fleets' hour (test_report_parity's, built once) and the
    alerts' own series over the same hour."""
    families, fleets = scenario_hour(keep=False)
    end = max(f.last for f in fleets)
    with engines_holding(families, extra=alert_inputs(end)) as urls:
        del families, fleets
        yield urls, end


Answer = dict[frozenset[tuple[str, str]], float]


def answer(url: str, expr: str, at: float) -> Answer:
    out: Answer = {}
    for item in prom_query(url, expr, at):
        key = frozenset(item["metric"].items())
        assert key not in out, f"{expr!r}: two samples for {dict(key)}"
        out[key] = float(item["value"][1])
    return out


def test_the_expressions_cover_every_rule() -> None:
    assert len(EXPRESSIONS) == len(all_rules()) >= 12
    assert any("(max by (namespace, workload, pod)" in e for _, e in EXPRESSIONS)  # a record was inlined


@pytest.mark.parametrize(("rule", "expr"), EXPRESSIONS, ids=[name for name, _ in EXPRESSIONS])
def test_both_engines_answer_every_rule_expression_alike(engines, rule: str, expr: str) -> None:
    urls, end = engines
    seen = 0
    differences: list[str] = []
    for ago in AGO:
        answers = {engine: answer(urls[engine], expr, end - ago) for engine in ENGINES}
        ours, theirs = answers["prometheus"], answers["victoria-metrics"]
        if set(ours) != set(theirs):
            only_ours, only_theirs = _show(set(ours) - set(theirs)), _show(set(theirs) - set(ours))
            differences.append(f"{ago:.0f} s before the end: only Prometheus {only_ours}, "
                               f"only VictoriaMetrics {only_theirs}")  # fmt: skip
        both = set(ours) & set(theirs)
        wrong = {k: (ours[k], theirs[k]) for k in both if not math.isclose(ours[k], theirs[k], rel_tol=1e-9)}
        if wrong:
            differences.append(f"{ago:.0f} s before the end: (Prometheus, VictoriaMetrics) {_show(wrong)}")
        seen += len(ours)
    assert not differences, f"{rule}:\n" + "\n".join(differences)
    assert seen, f"{rule}: no answer at any instant, so nothing was compared"


def _show(keys: Any) -> str:
    items = keys.items() if isinstance(keys, dict) else ((k, "") for k in keys)
    return "; ".join(f"{dict(sorted(k))} {v}" for k, v in list(items)[:4]) or "none"
