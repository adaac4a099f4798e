"""The simulated fleet's queues are published under the queue families, beside configured queues."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from servers import exporter, http_get, wait_for

from exporter.sources.simulated.source import load_scenario


def depth_series(url: str) -> dict[str, dict[str, str]]:
    text = http_get(url + "/metrics", {"Accept-Encoding": "identity"})[2].decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        if fam.name == "rightsizer_queue_depth":
            for s in fam.samples:
                out[s.labels["queue"]] = s.labels
    return out


def test_default_fleet_queues_are_published() -> None:
    queues = [g.queue for g in load_scenario("default").gpus if g.queue is not None]
    expected = {q.name: q.labels for q in queues}
    assert expected
    with exporter(["--simulate"]) as p:
        series = depth_series(p.url)
        assert set(series) == set(expected)
        for q in queues:
            # A queue standing for an inference server is published as that kind of source.
            assert series[q.name]["kind"] == (q.server or "simulated")
        for name, labels in expected.items():
            assert all(series[name][k] == v for k, v in labels.items())
        api = json.loads(http_get(p.url + "/api/v1/queues")[2])
        assert {q["name"] for q in api["queues"]} == set(expected)


def test_simulated_and_configured_queues_are_published_together(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    # A configured queue whose source is down still publishes source_up 0 beside the simulated ones.
    config.write_text("queues:\n  - {name: jobs, kind: redis, url: 'redis://127.0.0.1:1/0', key: jobs}\n")
    with exporter(["--simulate", "--config", str(config)]) as p:

        def both() -> bool:
            text = http_get(p.url + "/metrics", {"Accept-Encoding": "identity"})[2].decode()
            down = 'rightsizer_queue_source_up{queue="jobs",kind="redis"} 0'
            return down in text and "summarizer-requests" in text

        wait_for(both, 20, what="configured and simulated queues side by side")
        names = {q["name"] for q in json.loads(http_get(p.url + "/api/v1/queues")[2])["queues"]}
        assert "jobs" in names and "summarizer-requests" in names


def test_a_queue_feeding_several_gpus_is_one_series_linked_to_all_of_them() -> None:
    # The tensor-parallel pair declares its one vLLM server's queue on both GPUs: one series, as
    # the server's /metrics would show, never two series with the same labels.
    path = Path(__file__).parent / "scenarios" / "independent_long_context_moe.yaml"
    scenario = load_scenario(str(path))
    pair = [g for g in scenario.gpus if g.queue is not None and g.queue.name == "mixtral"]
    assert len(pair) == 2
    with exporter(["--simulate", str(path)]) as p:
        text = http_get(p.url + "/metrics", {"Accept-Encoding": "identity"})[2].decode()
        seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                assert key not in seen, f"duplicate series {key}"
                seen.add(key)
        queues = json.loads(http_get(p.url + "/api/v1/queues")[2])["queues"]
        mixtral = [q for q in queues if q["name"] == "mixtral"]
        assert len(mixtral) == 1
