"""values.schema.json refuses a wrong value before anything reaches the cluster: every value of
values.yaml is described, every object of the schema closed (``additionalProperties: false``), the
configuration files' part generated from the programs' own settings (scripts/helm-values-schema
keeps it current), and each wrong values file below fails ``helm template`` with a message naming
the value. A wrong key or value in a configuration file is one the program itself refuses.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm import CHART, refused, template, values
from servers import ROOT

SCRIPT = ROOT / "scripts" / "helm-values-schema"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_generated_part_is_current() -> None:
    result = run_script("--check")
    assert result.returncode == 0, result.stderr


def test_a_stale_schema_is_caught(tmp_path: Path) -> None:
    chart = tmp_path / "rightsizer"
    shutil.copytree(CHART, chart, symlinks=True)
    stale = json.loads((chart / "values.schema.json").read_text())
    del stale["definitions"]["exporter-config"]["properties"]["interval"]
    (chart / "values.schema.json").write_text(json.dumps(stale, indent=2) + "\n")
    result = run_script("--check", "--chart", str(chart))
    assert result.returncode == 1 and "out of date: run scripts/helm-values-schema" in result.stderr
    assert '"interval"' in result.stderr  # the diff shows what is missing


def resolve(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = SCHEMA["definitions"][schema["$ref"].removeprefix("#/definitions/")]
    return schema


def closed_objects(schema: Any, path: str) -> list[str]:
    """Paths of object schemas in ``schema`` that let an unknown key through."""
    open_ones: list[str] = []
    if isinstance(schema, dict):
        if "properties" in schema and schema.get("additionalProperties") is not False:
            open_ones.append(path)
        for k, v in schema.items():
            if k not in ("if", "then", "else"):  # conditions on a closed object, not objects of their own
                open_ones += closed_objects(v, f"{path}/{k}")
    elif isinstance(schema, list):
        for i, v in enumerate(schema):
            open_ones += closed_objects(v, f"{path}/{i}")
    return open_ones


def test_every_object_of_the_schema_is_closed() -> None:
    assert closed_objects(SCHEMA, "") == []


def test_every_value_is_described() -> None:
    def check(value: Any, schema: dict[str, Any], path: str) -> None:
        schema = resolve(schema)
        if isinstance(value, dict) and "properties" in schema:
            for k, v in value.items():
                assert k in schema["properties"], f"{path}.{k} is not in values.schema.json"
                check(v, schema["properties"][k], f"{path}.{k}")

    check(values(), SCHEMA, "")
    # and the reverse: every value the schema describes has a default in values.yaml
    def defaults(schema: dict[str, Any], value: Any, path: str) -> None:
        if schema.get("$ref", "").startswith(("#/definitions/io.k8s.", "#/definitions/exporter-config",
                                              "#/definitions/adapter-config")):
            return
        if value == {}:  # an optional object (issuerRef): empty unless given
            return
        for k, sub in schema.get("properties", {}).items():
            assert isinstance(value, dict) and k in value, f"{path}.{k} has no default in values.yaml"
            defaults(sub, value[k], f"{path}.{k}")

    defaults(SCHEMA, values(), "")


# (what is wrong, values, what helm's message must say)
WRONG = [
    ("typo at the top", {"exporterr": {}}, "additional properties 'exporterr' not allowed"),
    ("typo in a section", {"exporter": {"nodeSelecter": {}}},
     "at '/exporter': additional properties 'nodeSelecter'"),
    ("typo in the exporter's config", {"exporter": {"config": {"intervall": 2}}},
     "at '/exporter/config': additional properties 'intervall'"),
    ("string for a number", {"adapter": {"replicas": "two"}},
     "at '/adapter/replicas': got string, want integer"),
    ("negative replicas", {"adapter": {"replicas": -1}}, "at '/adapter/replicas': minimum: got -1, want 1"),
    ("unknown pull policy", {"image": {"pullPolicy": "Sometimes"}}, "at '/image/pullPolicy'"),
    ("unknown log level", {"exporter": {"config": {"log_level": "verbose"}}},
     "at '/exporter/config/log_level'"),
    ("sampling interval out of range", {"exporter": {"config": {"interval": 0}}},
     "at '/exporter/config/interval': minimum: got 0, want 0.05"),
    ("a tag for a digest", {"image": {"digest": "latest"}}, "at '/image/digest'"),
    ("typo in resources", {"adapter": {"resources": {"limit": {"memory": "1Gi"}}}},
     "at '/adapter/resources': additional properties 'limit'"),
    ("typo in a security context", {"exporter": {"securityContext": {"runAsUsr": 0}}},
     "at '/exporter/securityContext': additional properties 'runAsUsr'"),
    ("a toleration that is not a list", {"exporter": {"tolerations": {"key": "nvidia.com/gpu"}}},
     "at '/exporter/tolerations': got object, want array"),
    ("a Secret certificate without its Secret", {"adapter": {"tls": {"source": "secret", "caBundle": "Y2E"}}},
     "at '/adapter/tls/secretName': minLength: got 0, want 1"),
    ("unknown certificate source", {"adapter": {"tls": {"source": "letsencrypt"}}},
     "at '/adapter/tls/source'"),
    ("a scrape interval in words", {"monitoring": {"interval": "15 seconds"}}, "at '/monitoring/interval'"),
    ("typo in an adapter rule", {"adapter": {"config": {"rules": [{"name": "x", "qurey": "up"}]}}},
     "at '/adapter/config/rules/0': additional properties 'qurey'"),
    ("a Prometheus URL without a scheme", {"adapter": {"prometheusUrl": "prometheus:9090"}},
     "at '/adapter/prometheusUrl'"),
    ("a number for the simulated scenario", {"exporter": {"simulate": 1}}, "at '/exporter/simulate'"),
    ("a price set no file holds", {"exporter": {"config": {"catalog": {"price_set": "aws-reserved"}}}},
     "at '/exporter/config/catalog/price_set'"),
]


@pytest.mark.parametrize(("wrong", "override", "message"), WRONG, ids=[w for w, _, _ in WRONG])
def test_a_wrong_value_is_refused_naming_it(wrong: str, override: dict[str, Any], message: str,
                                            tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(override))
    said = refused("-f", str(path))
    assert "values don't meet the specifications of the schema" in said
    assert message in said, said
    assert len([line for line in said.splitlines() if line.startswith("- at ")]) == 1, said  # only it


IN_CONFIG = [w for w in WRONG if "config" in w[1].get("exporter", w[1].get("adapter", {}))]


@pytest.mark.parametrize(("wrong", "override", "message"), IN_CONFIG, ids=[w for w, _, _ in IN_CONFIG])
def test_the_program_refuses_the_same_configuration(wrong: str, override: dict[str, Any], message: str,
                                                    tmp_path: Path) -> None:
    program = "exporter" if "exporter" in override else "adapter"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(override[program]["config"]))
    mode = ["--prometheus-url=http://127.0.0.1:9"] if program == "adapter" else ["--simulate"]
    result = subprocess.run([sys.executable, "-m", program, "--config", str(path), *mode, "--check-config"],
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 2, (wrong, result.stdout, result.stderr)
    assert deepest_key(override) in result.stderr, result.stderr  # and names the same key


def deepest_key(tree: Any) -> str:
    while isinstance(tree, dict | list):
        tree = tree[-1] if isinstance(tree, list) else tree[list(tree)[-1]]
        if isinstance(tree, dict):
            last = list(tree)[-1]
            if not isinstance(tree[last], dict | list):
                return str(last)
    raise AssertionError("no key")


GOOD = [
    {"adapter": {"replicas": 1}},
    {"image": {"digest": "sha256:" + "0" * 64}},
    {"adapter": {"tls": {"source": "secret", "secretName": "s", "caBundle": "Y2E="}}},
    {"exporter": {"simulate": "mig", "config": {"interval": 0.5, "log_level": "debug"}}},
    {"adapter": {"config": {"rules": [{"name": "x", "query": "up"}]}}},
    {"exporter": {"config": {"catalog": {"price_set": "gcp-committed-1y"}}}},
]


@pytest.mark.parametrize("override", GOOD, ids=lambda o: json.dumps(o)[:40])
def test_right_values_next_to_the_wrong_ones_render(override: dict[str, Any], tmp_path: Path) -> None:
    """So each wrong value above fails for being wrong, not for its neighbours."""
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(override))
    assert template("-f", str(path))
