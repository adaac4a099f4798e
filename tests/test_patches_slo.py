"""A move of a workload that declares a latency SLO carries the SLO: its latency today and projected
on the recommended option, in the patch header, the README and the move's JSON (the exporter's
``/api/v1/patches`` on tests/scenarios/slo_latency.yaml).

Projections from the scenario's physics (its comments): chat-room's ITL p95 ~7.7 ms on the H100
becomes 7.7 / 0.258 (the L40S's 864 GB/s over 3.35 TB/s) = 30 ms on the L40S against a 100 ms
target; chat-tight's becomes 7.7 x 3350 / 2000 = 12.9 ms on the B200's 1g.45gb slice against 20 ms
(18 ms with the 10 % margin); chat-itl's ITL p95 ~90 ms on the L4 becomes 90 / 2.88 = 31 ms on the
L40S against 80 ms. Each keeps its targets with the margin.
"""

from __future__ import annotations

import json
from pathlib import Path

from servers import exporter, http_get

SCENARIO = Path(__file__).parent / "scenarios" / "slo_latency.yaml"
# workload -> (option, ITL projected at least / at most, seconds)
EXPECTED = {
    "chat-room": ("L40S-48GB", 0.020, 0.040),
    "chat-tight": ("B200-SXM-180GB/1g.45gb", 0.009, 0.018),
    "chat-itl": ("L40S-48GB", 0.020, 0.045),
}


def test_a_move_under_an_slo_says_its_projected_latency(tmp_path: Path) -> None:
    config = tmp_path / "exporter.yaml"
    config.write_text("patches: {include_estimated_prices: true}\n")
    with exporter(["--simulate", str(SCENARIO), "--config", str(config)]) as exp:
        status, _, body = http_get(exp.url + "/api/v1/patches")
    assert status == 200
    got = json.loads(body)["patches"]
    moves = {m["workload"]: m for m in got["moves"]}
    files = {f["name"]: f["content"] for f in got["files"]}
    for workload, (option, low, high) in EXPECTED.items():
        m = moves[workload]
        assert m["outcome"] == "patch" and m["change"].endswith(f"-> {option}"), (workload, m["why"])
        slo = m["slo"]
        itl = {p["slo"]: p for p in slo["projected"]}["itl"]
        assert low <= itl["seconds"] <= high, (workload, itl)
        assert slo["keeps"] is True and "keeps every target with the 10% margin" in slo["words"]
        assert "# Latency SLO: today " in files[m["file"]] and "inter-token latency p95 " in files[m["file"]]
        assert f"projected on {option}: " in files[m["file"]]
    assert files["README.md"].count("- Latency SLO: today ") >= len(EXPECTED)
