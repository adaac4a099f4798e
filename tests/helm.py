"""The Helm chart (deploy/helm/rightsizer) through the real helm binary, no cluster needed.

``template`` renders with ``helm template`` (Helm validates the values against values.schema.json
first) and parses the objects; renders are cached per argument list and each caller gets its own
copy. The release is called ``rightsizer`` in namespace ``rightsizer`` unless a test says otherwise,
so that object names match deploy/base's.
"""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from k8s_tools import tool
from servers import ROOT

CHART = ROOT / "deploy" / "helm" / "rightsizer"
# The ci/ examples and the cluster flavours (values-gke.yaml, ...): each is linted, rendered and
# validated, and its wiring checked, as the defaults are.
CI_VALUES = sorted(
    p.relative_to(CHART).as_posix() for p in [*(CHART / "ci").glob("*.yaml"), *CHART.glob("values-*.yaml")]
)
RELEASE = NAMESPACE = "rightsizer"


def helm(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``helm ARGS`` with its output; never raises for a non-zero exit."""
    return subprocess.run([tool("helm"), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def errors(result: subprocess.CompletedProcess[str]) -> str:
    """helm's stderr less its notice that the chart's rule file is a link (files/prometheusrule.yaml)."""
    return "\n".join(line for line in result.stderr.splitlines() if "found symbolic link" not in line)


@cache
def _template(args: tuple[str, ...], release: str, namespace: str) -> str:
    result = helm("template", release, str(CHART), "--namespace", namespace, *args)
    assert result.returncode == 0, f"helm template {' '.join(args)}: {errors(result)}"
    return json.dumps([d for d in yaml.safe_load_all(result.stdout) if d])


def template(*args: str, release: str = RELEASE, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """The chart's objects for these ``helm template`` arguments (``-f FILE``, ``--set K=V``)."""
    return list(json.loads(_template(args, release, namespace)))


def values_args(values_file: str | None) -> tuple[str, ...]:
    """``-f FILE`` for a values file of the chart (ci/ or a flavour); nothing for the defaults."""
    return ("-f", str(CHART / values_file)) if values_file else ()


def refused(*args: str) -> str:
    """What ``helm template`` says when it refuses these arguments (fails the test if it renders)."""
    result = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args)
    assert result.returncode != 0, f"helm template {' '.join(args)} rendered"
    return errors(result)


def values() -> dict[str, Any]:
    return dict(yaml.safe_load((CHART / "values.yaml").read_text()))
