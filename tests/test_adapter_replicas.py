"""Two adapter replicas behind one Service give every client the same answer: both in Prometheus
mode against one engine (Prometheus, then VictoriaMetrics) holding the same ten minutes of the
scenario fleet, each (rule, namespace, selector) asked of both through the external metrics API
and KEDA's metrics-api JSON. The answers must be identical, errors included (404 for nothing
selected stays 404 on both, never a 0 on one of them), and some must carry non-zero values."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import yaml
from adapter_support import ANONYMOUS, adapter
from report_history import ENGINES, engines_with_history
from servers import Process
from test_adapter_engines import SCENARIOS, answers, extra_series, readme_rules, rule_names


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[Process, Process]]]:
    config = tmp_path_factory.mktemp("adapter") / "adapter.yaml"
    # the history ends when it is written: its last samples count as current for the whole test
    config.write_text(yaml.safe_dump({"rules": readme_rules(), "prometheus": {"stale_after_seconds": 3600}}))
    with engines_with_history(SCENARIOS, 600, 15, extra=extra_series(time.time())) as (urls, _):
        args = ["--config", str(config), "--refresh-interval", "1"]
        with (
            adapter(["--prometheus-url", urls["prometheus"], *args], env=ANONYMOUS) as p1,
            adapter(["--prometheus-url", urls["prometheus"], *args], env=ANONYMOUS) as p2,
            adapter(["--prometheus-url", urls["victoria-metrics"], *args], env=ANONYMOUS) as v1,
            adapter(["--prometheus-url", urls["victoria-metrics"], *args], env=ANONYMOUS) as v2,
        ):
            yield {"prometheus": (p1, p2), "victoria-metrics": (v1, v2)}


@pytest.mark.parametrize("engine", ENGINES)
def test_two_replicas_on_one_engine_answer_alike(replicas, engine: str) -> None:
    one, two = replicas[engine]
    namespaces = ["llm", "batch", "research", "default"]
    selectors = ["", "queue=chat", "verdict=idle", "workload=summarizer", "workload=no-such-workload"]
    codes: dict[int, int] = {}
    nonzero = 0
    for rule in rule_names():
        for namespace in namespaces:
            for selector in selectors:
                a, b = answers(one, rule, namespace, selector), answers(two, rule, namespace, selector)
                assert a == b, (rule, namespace, selector, a, b)
                code, items = a["external"]
                codes[code] = codes.get(code, 0) + 1
                if code == 200:
                    nonzero += sum(1 for _, value in items if value != "0")
    assert nonzero >= 10 and codes.get(404), (nonzero, codes)
