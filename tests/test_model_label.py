"""The GPU model's label: ``modelName`` on dcgm-exporter's families, ``model_name`` on ours.

docs/metrics.md says so in one place, with the queries that join the two; this holds the page to
it (every other GPU label identical, so joins on the GPU's identity work) and runs those queries
on a real Prometheus holding the default simulated fleet's history.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

from doc_blocks import all_blocks, kind
from prometheus_client.parser import text_string_to_metric_families
from report_history import prometheus_with_history
from servers import ROOT, prom_query, require_binary

from exporter.render import Renderer
from exporter.sources.simulated.source import SimulatedSource, load_scenario
from rightsizer_core.snapshot import Snapshot

DEFAULT = ROOT / "exporter/scenarios/default.yaml"
MIG = ROOT / "exporter/scenarios/mig.yaml"


def documented_queries() -> list[str]:
    blocks = [b for b in all_blocks() if kind(b) == "model-label-promql"]
    assert [b.document for b in blocks] == ["docs/metrics.md"]  # said in one place
    return [line for line in blocks[0].body.splitlines() if line.strip()]


def page(path: Path) -> str:
    source = SimulatedSource(load_scenario(str(path)))
    reading = next(iter(source.history(1, 1)))
    snap = Snapshot(reading.timestamp, "sim-node", reading.gpus, (reading.status,), {}, {})
    return Renderer("Hostname").render(snap).text.decode()


def test_dcgm_families_spell_model_name_camel_and_ours_snake() -> None:
    for path in (DEFAULT, MIG):
        text = page(path)
        dcgm: dict[tuple[str, str], dict[str, str]] = {}
        own: dict[tuple[str, str], dict[str, str]] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if "UUID" not in s.labels:
                    continue
                key = (s.labels["UUID"], s.labels.get("GPU_I_ID", ""))
                if s.name.startswith("DCGM_"):
                    assert "modelName" in s.labels and "model_name" not in s.labels, s
                    dcgm[key] = s.labels
                else:
                    assert s.name.startswith("rightsizer_"), s.name
                    assert "model_name" in s.labels and "modelName" not in s.labels, s
                    if s.name == "rightsizer_gpu_up":
                        own[key] = s.labels
        assert dcgm and set(dcgm) <= set(own), path
        for key, labels in dcgm.items():  # the same GPU labels but the model's name
            renamed = {("modelName" if k == "model_name" else k): v for k, v in own[key].items()}
            assert renamed == labels, key


def lint(text: str) -> list[str]:
    done = subprocess.run([require_binary("promtool"), "check", "metrics"], input=text,
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    return sorted(set((done.stdout + done.stderr).splitlines()))


def test_own_families_pass_promtool_and_dcgm_ones_trip_it_on_model_name_alone() -> None:
    """Why the spellings differ: promtool's lint rejects ``modelName``, and nothing else of the
    GPU labels: a DCGM gauge with the model's label spelt as ours lints clean."""
    text = page(DEFAULT)
    own = "".join("# HELP " + b for b in text.split("# HELP ") if b.startswith("rightsizer_gpu_"))
    assert "rightsizer_gpu_up{" in own and lint(own) == []
    dcgm = "".join("# HELP " + b for b in text.split("# HELP ") if b.startswith("DCGM_FI_DEV_GPU_UTIL "))
    assert "modelName=" in dcgm and lint(dcgm) == [
        "DCGM_FI_DEV_GPU_UTIL label names should be written in 'snake_case' not 'camelCase'"
    ]
    assert lint(dcgm.replace("modelName=", "model_name=")) == []


def test_documented_joins_answer_on_prometheus() -> None:
    join, by_model = documented_queries()
    with prometheus_with_history([DEFAULT], 120, 15, instances=True) as (url, fleets):
        # the GPUs of the newest exposition the engine holds: a GPU with no past (new-a100) joins
        # the simulated fleet a moment after it starts, so a reading taken later may hold one more
        gpus = fleets[0].source.reading_at(fleets[0].last, history=True).gpus
        want_models = Counter(g.identity.model for g in gpus)
        util = prom_query(url, "DCGM_FI_DEV_GPU_UTIL")
        current = prom_query(url, "rightsizer_gpu_verdict == 1")
        verdicts = {r["metric"]["UUID"]: r["metric"]["verdict"] for r in current}
        joined = prom_query(url, join)
        assert len(util) == len(gpus) == len(joined) == len(verdicts)
        for r in joined:
            m = r["metric"]
            assert m["verdict"] == verdicts[m["UUID"]] and m["modelName"], m
        counted = {r["metric"]["modelName"]: int(r["value"][1]) for r in prom_query(url, by_model)}
        assert counted == dict(want_models)
