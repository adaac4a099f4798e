from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# Fixtures shared across test modules: the libnvidia-ml.so.1 test double.
pytest_plugins = ["nvmldouble"]
