"""Build Rightsizer's Grafana dashboards and write them as JSON into dashboards/.

The dashboards are code (grafana-foundation-sdk builders, Grafana 11.6 schema); the JSON files
are what Grafana imports and what dashboards/provisioning loads. After changing a dashboard:

    python dashboards/build/generate.py           # rewrite dashboards/*.json
    python dashboards/build/generate.py --check   # exit 1, naming the file, if a JSON file is stale

Needs the test extra (pip install -e '.[test]').
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import autoscaling
import fleet
import gpu_detail
import health
from grafana_foundation_sdk.builders import dashboard as db
from panels import to_json

OUT = Path(__file__).resolve().parent.parent
DASHBOARDS: dict[str, Callable[[], db.Dashboard]] = {
    "rightsizer-fleet.json": fleet.build,
    "rightsizer-gpu.json": gpu_detail.build,
    "rightsizer-autoscaling.json": autoscaling.build,
    "rightsizer-health.json": health.build,
}


def render(build: Callable[[], db.Dashboard]) -> str:
    return json.dumps(to_json(build()), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    stale = []
    for name, build in DASHBOARDS.items():
        text, path = render(build), OUT / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    for name in stale:
        print(
            f"dashboards/{name} differs from what dashboards/build/generate.py builds; run it",
            file=sys.stderr,
        )
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
