"""SLO declarations are checked like every other setting: one clear line naming the entry, for the
exporter's ``slos:`` and a scenario queue's ``slo:``; a good one loads with its defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from exporter.config import load_config
from exporter.sources.simulated.source import SimulatedSource, load_scenario
from rightsizer_core.settings import ConfigError


def config(tmp_path: Path, slos: object) -> Path:
    path = tmp_path / "exporter.yaml"
    path.write_text(yaml.safe_dump({"slos": slos}))
    return path


def test_a_declaration_loads_with_its_default_objective(tmp_path: Path) -> None:
    cfg = load_config(
        str(config(tmp_path, [{"namespace": "chat", "workload": "llama", "ttft_seconds": 0.5}])), {}
    )
    (slo,) = cfg.slos
    assert (slo.objective, slo.targets) == (0.95, {"ttft": 0.5})
    assert slo.matches("q", {"namespace": "chat", "workload": "llama"})
    assert not slo.matches("q", {"namespace": "chat", "workload": "other"})


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"namespace": "chat", "ttft_seconds": 0.5}, "names its workload: namespace and workload, or queue"),
        ({"queue": "chat"}, "needs a target"),
        ({"queue": "chat", "itl_seconds": -1}, "itl_seconds"),
        ({"queue": "chat", "ttft_seconds": 1, "objective": 1.5}, "objective"),
        ({"queue": "chat", "ttft_seconds": 1, "p99": 2}, "p99"),
    ],
)
def test_a_bad_declaration_is_one_clear_line(tmp_path: Path, entry: dict, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(str(config(tmp_path, [entry])), {})
    text = str(exc.value)
    assert message in text and "slos" in text and "\n" not in text, text


def test_a_scenario_slo_needs_the_queues_server(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"gpus": [{
        "model": "L4-24GB", "workload": {"kind": "steady_inference"},
        "queue": {"name": "q", "slo": {"ttft_seconds": 1}},
    }]}))  # fmt: skip
    with pytest.raises(ConfigError, match=r"queue\.slo: needs the queue's server"):
        load_scenario(str(path))


def test_a_scenario_declares_slos_top_level_or_on_its_queue(tmp_path: Path) -> None:
    queue = {"name": "q", "server": "vllm", "labels": {"namespace": "llm", "workload": "chat"}}
    gpu = {"model": "L4-24GB", "workload": {"kind": "steady_inference"}, "queue": queue}
    top = tmp_path / "top.yaml"
    top.write_text(yaml.safe_dump({"gpus": [gpu], "slos": [{"namespace": "llm", "workload": "chat",
                                                              "ttft_seconds": 2}]}))  # fmt: skip
    own = tmp_path / "own.yaml"
    own.write_text(yaml.safe_dump({"gpus": [{**gpu, "queue": {**gpu["queue"], "slo": {"ttft_seconds": 2}}}]}))
    (a,) = SimulatedSource(load_scenario(str(top))).slos
    (b,) = SimulatedSource(load_scenario(str(own))).slos
    assert a.key("q") == b.key("q") == ("llm", "chat") and a.targets == b.targets == {"ttft": 2.0}
