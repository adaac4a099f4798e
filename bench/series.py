"""Series per node by ``families`` preset: the exporter's own /metrics, counted.

Each built-in simulated scenario (``default``: 8 GPUs; ``mig``: 8 with some split into MIG
instances; ``large64``: 64) runs in a
real exporter process with each preset (all families, ``shipped``, ``headless``); after a few
sampling cycles (so right-sizing, queue and pod rows exist) one scrape is counted: sample lines, and
the families they belong to.

    .venv/bin/python bench/series.py [--scenarios default,mig,large64] [--nodes 5000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import yaml

# bench/exporter.py would shadow the exporter package: import from the repository root instead.
sys.path[0] = str(Path(__file__).resolve().parent.parent)
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))

from servers import exporter, http_get  # noqa: E402

PRESETS = ("all", "shipped", "headless")


def count(scenario: str, preset: str, workdir: Path) -> tuple[int, int, int]:
    """(series, families, GPUs answering) of one scrape of the exporter on ``scenario`` with ``preset``."""
    args = ["--simulate", scenario, "--interval", "0.2"]
    if preset != "all":
        config = workdir / f"{preset}.yaml"
        config.write_text(yaml.safe_dump({"families": [preset]}))
        args += ["--config", str(config)]
    with exporter(args) as p:
        time.sleep(2.0)  # ten cycles: every extension has published its rows
        code, _, body = http_get(p.url + "/metrics")
        assert code == 200, code
    lines = [line for line in body.decode().splitlines() if line and not line.startswith("#")]
    families = {line.split("{", 1)[0].split(" ", 1)[0] for line in lines}
    return len(lines), len(families), sum(line.startswith("rightsizer_gpu_up{") for line in lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="default,mig,large64")
    parser.add_argument("--nodes", type=int, default=5000, help="fleet size for the extrapolated total")
    args = parser.parse_args()
    print("Series per node by families preset (simulated fleet, real exporter, one scrape)")
    fleet = f"x {args.nodes} nodes"
    print(f"{'scenario':10} {'GPUs':>4} {'preset':9} {'series':>7} {'families':>8} {fleet:>14}")
    with tempfile.TemporaryDirectory(prefix="bench-series-") as tmp:
        for scenario in args.scenarios.split(","):
            for preset in PRESETS:
                series, families, gpus = count(scenario, preset, Path(tmp))
                total = series * args.nodes
                print(f"{scenario:10} {gpus:4d} {preset:9} {series:7d} {families:8d} {total / 1e6:12.2f} M")


if __name__ == "__main__":
    main()
