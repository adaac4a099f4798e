"""``rightsizer report --format patches`` against Prometheus (and VictoriaMetrics) holding an hour of
tests/scenarios/patches_fleet.yaml and kube-state-metrics's owner series; the patches applied to the
fixture manifests (tests/fixtures/patches) with the real ``kubectl kustomize``.

Each patched object must validate strictly for every supported Kubernetes release, ask for exactly
the recommended resource, select exactly the recommended GPU's nodes (GPU Feature Discovery's
``nvidia.com/gpu.product`` value for it) and differ from the manifest in nothing else: the whole
object is compared with the manifest changed by hand as written below.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import report_history
import yaml
from patches_rig import FIXTURES as FIXTURE_DIR
from patches_rig import SCENARIO, applied, ksm_series, pod_spec, products, required_terms, validate_strictly
from report_files import report

HOUR, STEP = 3600.0, 15.0
GPU, PRODUCT, L4 = "nvidia.com/gpu", "nvidia.com/gpu.product", "NVIDIA-L4"
FIXTURES = str(FIXTURE_DIR)
Key = tuple[str, str, str]


@pytest.fixture(scope="module")
def history() -> Iterator[tuple[dict[str, str], float]]:
    """Both engines holding the fleet's hour and the owner series of its pods."""
    extra = ksm_series(time.time())
    with report_history.engines_with_history([SCENARIO], HOUR, STEP, extra=extra) as (urls, fleets):
        yield urls, fleets[0].last + 1


def patches(url: str, at: float, out: Path, *args: str) -> dict[str, str]:
    done = report(url, at, "--format", "patches", "--output", str(out), *args)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == ""
    return {p.name: p.read_text() for p in sorted(out.iterdir())}


# --- what each move must do to its manifest, written from the scenario's expectations ------------


def summarizer(spec: dict[str, Any]) -> None:
    # H100 -> L4, whole GPUs: its own nodeSelector keeps "pool" and now names the L4; count kept.
    spec["nodeSelector"][PRODUCT] = "NVIDIA-L4"


def ranker_mixed(spec: dict[str, Any]) -> None:
    # Whole A100 80GB -> whole L4 (its 1g.20gb slice takes 2 of 8 memory slices, $1.28/h, more than
    # the L4): the L4's product in every required term (the first named the A100, now the L4; the
    # second, zone-only, gains it). Resources, the sidecar and the preferences stay.
    terms = required_terms(spec)
    terms[0]["matchExpressions"][1]["values"] = [L4]
    terms[1]["matchExpressions"].append({"key": PRODUCT, "operator": "In", "values": [L4]})


def intent_mixed(spec: dict[str, Any]) -> None:
    # Two H100 1g.10gb slices -> whole L4s: each container's slice renamed to nvidia.com/gpu (in
    # requests only where it had them; the count as written, "1" stays a string), the L4's nodes.
    spec["nodeSelector"] = {PRODUCT: L4}
    vllm, encoder = spec["containers"]
    vllm["resources"] = {"requests": {GPU: 1}, "limits": {GPU: 1}}
    encoder["resources"] = {"limits": {GPU: "1"}}


def tiny(spec: dict[str, Any]) -> None:
    # B200 -> L40S: a nodeSelector where there was none.
    spec["nodeSelector"] = {PRODUCT: "NVIDIA-L40S"}


MIXED: dict[Key, Callable[[dict[str, Any]], None]] = {
    ("Deployment", "llm", "summarizer"): summarizer,
    ("StatefulSet", "search", "ranker"): ranker_mixed,
    ("Job", "llm", "intent"): intent_mixed,
}
# Where each patched object's pods may land, and what its GPU containers ask for.
LANDS = {
    ("Deployment", "llm", "summarizer"): ({"NVIDIA-L4"}, {"server": {GPU: 1}}),
    ("StatefulSet", "search", "ranker"): ({L4}, {"server": {GPU: 1}}),
    ("Job", "llm", "intent"): ({L4}, {"vllm": {GPU: 1}, "encoder": {GPU: "1"}}),
    ("Deployment", "llm", "tiny"): ({"NVIDIA-L40S"}, {"server": {GPU: 1}}),
}  # fmt: skip


def check_applied(
    tmp: Path, out: Path, changes: dict[Key, Callable[[dict[str, Any]], None]], base: Path | None = None
) -> dict[Key, Any]:
    before, after = applied(tmp, out) if base is None else applied(tmp, out, base)
    assert set(after) == set(before)
    for key, obj in before.items():
        want = copy.deepcopy(obj)
        if key in changes:
            changes[key](pod_spec(want))
        assert after[key] == want, f"{key}: the patched object differs from the manifest changed by hand"
        validate_strictly(after[key])
    return after


def gpu_asks(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for c in pod_spec(obj)["containers"]:
        limits = c.get("resources", {}).get("limits", {})
        if any(k.startswith("nvidia.com/") for k in limits):
            out[c["name"]] = {k: v for k, v in limits.items() if k.startswith("nvidia.com/")}
    return out


def test_each_patch_moves_its_workload_exactly_where_the_report_says(history, tmp_path: Path) -> None:
    urls, at = history
    out = tmp_path / "patches"
    files = patches(urls["prometheus"], at, out, "--manifests", FIXTURES)
    # The B200's price is an estimate, default/scratch has no owner, the notebook is idle: no patch.
    assert set(files) == {"kustomization.yaml", "README.md", "llm_deployment_summarizer.yaml",
                          "search_statefulset_ranker.yaml", "llm_job_intent.yaml"}  # fmt: skip
    after = check_applied(tmp_path, out, MIXED)
    for key, (nodes, asks) in LANDS.items():
        if key in MIXED:
            assert products(after[key]) and all(p == nodes for p in products(after[key])), key
            assert {c: a for c, a in gpu_asks(after[key]).items()} == asks, key
    # Each patch's header: the evidence window and date, the owner and where it was read, the move.
    head = files["llm_deployment_summarizer.yaml"].split("\napiVersion:", 1)[0].splitlines()
    assert all(line.startswith("# ") for line in head)
    text = "\n".join(head)
    assert "Evidence: the 1 h from " in text and time.strftime("%Y-%m-%d", time.gmtime(at)) in text
    assert "Owner: Deployment llm/summarizer, from kube-state-metrics: kube_pod_owner" in text
    assert "2 GPUs in 2 pods (2 overprovisioned): H100-SXM-80GB -> L4-24GB; saves $" in text
    readme = files["README.md"]
    for words in ("llm/tiny", "B200-SXM-180GB: the price is an estimate", "default/scratch",
                  "kube-state-metrics has no kube\\_pod\\_owner for this pod", "research/notebook"):
        assert words in readme, words  # fmt: skip


def test_estimated_prices_are_patched_when_asked(history, tmp_path: Path) -> None:
    urls, at = history
    out = tmp_path / "patches"
    files = patches(urls["prometheus"], at, out, "--manifests", FIXTURES, "--include-estimated-prices")
    assert "llm_deployment_tiny.yaml" in files
    after = check_applied(tmp_path, out, {**MIXED, ("Deployment", "llm", "tiny"): tiny})
    assert products(after[("Deployment", "llm", "tiny")]) == [{"NVIDIA-L40S"}]
    assert "estimate" in files["llm_deployment_tiny.yaml"].split("\napiVersion:", 1)[0]


def test_victoria_metrics_gives_the_same_patches(history, tmp_path: Path) -> None:
    urls, at = history
    got = {e: patches(u, at, tmp_path / e, "--manifests", FIXTURES) for e, u in urls.items()}
    assert got["victoria-metrics"] == got["prometheus"]


def single(obj: dict[str, Any]) -> None:
    """A manifest as written for the single strategy: every MIG slice asked for as nvidia.com/gpu."""
    for c in pod_spec(obj)["containers"]:
        for part in c.get("resources", {}).values():
            for k in [k for k in part if k.startswith("nvidia.com/mig-")]:
                part[GPU] = part.pop(k)


def test_single_strategy_moves_by_the_product_label(history, tmp_path: Path) -> None:
    urls, at = history
    base = tmp_path / "single-base"
    base.mkdir()
    for f in FIXTURE_DIR.iterdir():
        docs = [d for d in yaml.safe_load_all(f.read_text()) if d]
        if f.name != "kustomization.yaml":
            for d in docs:
                single(d)
        (base / f.name).write_text(yaml.safe_dump_all(docs))
    out = tmp_path / "patches"
    files = patches(urls["prometheus"], at, out, "--manifests", str(base), "--mig-strategy", "single")
    assert "llm_job_intent.yaml" in files and "search_statefulset_ranker.yaml" in files

    def intent(spec: dict[str, Any]) -> None:
        # Under "single" the slices were asked for as nvidia.com/gpu on nodes labelled
        # <GPU>-MIG-<profile>; the whole L4 is asked for the same way: only the nodes change.
        spec["nodeSelector"] = {PRODUCT: L4}

    after = check_applied(tmp_path, out, {**MIXED, ("Job", "llm", "intent"): intent}, base)
    assert gpu_asks(after[("Job", "llm", "intent")]) == {"vllm": {GPU: 1}, "encoder": {GPU: "1"}}


def test_a_manifest_of_the_other_strategy_is_refused_not_patched(history, tmp_path: Path) -> None:
    urls, at = history
    out = tmp_path / "p"
    files = patches(urls["prometheus"], at, out, "--manifests", FIXTURES, "--mig-strategy", "single")
    assert "llm_job_intent.yaml" not in files
    assert "is patches.mig\\_strategy the cluster's?" in files["README.md"]
