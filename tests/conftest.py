from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# Fixtures shared across test modules: the libnvidia-ml.so.1 test double; the report files that
# the HTML, Markdown and browser tests read; the control-plane rig (tests/control_plane_rig.py);
# the Prometheus version a test runs on (tests/prometheus_versions.py).
pytest_plugins = ["nvmldouble", "report_files", "control_plane_rig", "prometheus_versions"]
