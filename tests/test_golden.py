"""End-to-end golden test in node_exporter's style: the real exporter on the deterministic
``golden`` scenario, /metrics diffed with tests/golden/simulated.prom, which promtool lints.

To rewrite the golden file after an intended change: ``UPDATE_GOLDEN=1 scripts/test -k golden``
(then review the diff before committing it).
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
from pathlib import Path

from servers import exporter, http_get, require_binary

from exporter.metrics import PROMTOOL_EXCEPTIONS

GOLDEN = Path(__file__).parent / "golden" / "simulated.prom"

# Values that legitimately differ between runs: how long a collector took, and the build.
VOLATILE = [
    # (durations become 0, a value promtool can still parse)
    (re.compile(r"^(rightsizer_collector_duration_seconds\{[^}]*\}) .*$", re.M), r"\1 0"),
    (re.compile(r"^(rightsizer_http_open_connections) .*$", re.M), r"\1 0"),  # the harness's own probes
    (
        re.compile(r'^(rightsizer_build_info)\{version="[^"]*",python_version="[^"]*"\}', re.M),
        r'\1{version="<version>",python_version="<python>"}',
    ),
]


def normalise(text: str) -> str:
    for pattern, replacement in VOLATILE:
        text = pattern.sub(replacement, text)
    return text


def scrape_golden() -> str:
    with exporter(["--simulate", "golden", "--hostname", "golden-node"]) as p:
        status, _, body = http_get(p.url + "/metrics", {"Accept-Encoding": "identity"})
    assert status == 200
    return normalise(body.decode())


def test_metrics_match_golden_file() -> None:
    got = scrape_golden()
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(got)
    want = GOLDEN.read_text()
    if got != want:
        diff = "".join(
            difflib.unified_diff(want.splitlines(True), got.splitlines(True), "golden", "scraped", n=1)
        )
        raise AssertionError(
            f"/metrics differs from {GOLDEN.name} (UPDATE_GOLDEN=1 rewrites it):\n{diff[:6000]}"
        )


def test_golden_file_passes_promtool_but_for_listed_dcgm_exceptions() -> None:
    promtool = require_binary("promtool")
    result = subprocess.run(
        [promtool, "check", "metrics"], input=GOLDEN.read_bytes(), capture_output=True, timeout=30
    )
    assert result.returncode in (0, 3), result.stderr.decode()  # 1 would be a parse error
    findings = set()
    for line in (result.stdout + result.stderr).decode().splitlines():
        name, _, finding = line.partition(" ")
        findings.add((name, finding))
    assert findings - PROMTOOL_EXCEPTIONS == set()
