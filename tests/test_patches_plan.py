"""What gets a patch, and what does not, and why: the planner on GPUs held by pods with verdicts
(tests/patches_units.py), owners from kube-state-metrics's series or from pod names."""

from __future__ import annotations

import yaml
from patches_units import evidence, held, patch_set

from rightsizing.patches.owners import OwnerSeries, resolve

DEPLOY = OwnerSeries(
    pods={("llm", f"chat-7b9c4-{p}"): ("ReplicaSet", "chat-7b9c4") for p in ("x2k9q", "bcdfg")},
    replicasets={("llm", "chat-7b9c4"): ("Deployment", "chat")},
    present=True,
)  # fmt: skip


def only(ps):  # type: ignore[no-untyped-def]
    (move,) = ps.moves
    return move


# --- owners --------------------------------------------------------------------------------------


def test_kube_state_metrics_owner_chains() -> None:
    series = OwnerSeries(
        pods={
            ("a", "web-7b9c4-x2k9q"): ("ReplicaSet", "web-7b9c4"),
            ("a", "lone-7b9c4-x2k9q"): ("ReplicaSet", "lone-7b9c4"),
            ("a", "gone-7b9c4-x2k9q"): ("ReplicaSet", "gone-7b9c4"),
            ("a", "nightly-29123456-x2k9q"): ("Job", "nightly-29123456"),
            ("a", "debug"): ("<none>", "<none>"),
            ("a", "static-node-1"): ("Node", "node-1"),
            ("a", "lws-0"): ("LeaderWorkerSet", "lws"),
        },
        replicasets={("a", "web-7b9c4"): ("Deployment", "web"), ("a", "lone-7b9c4"): ("<none>", "<none>")},
        jobs={("a", "nightly-29123456"): ("CronJob", "nightly")},
        present=True,
    )

    def kind(pod: str) -> object:
        o = resolve("a", pod, series)
        return o if isinstance(o, str) else (o.kind, o.name, o.assumed)

    assert kind("web-7b9c4-x2k9q") == ("Deployment", "web", False)
    assert kind("lone-7b9c4-x2k9q") == ("ReplicaSet", "lone-7b9c4", False)
    # The ReplicaSet's owner series is missing: the Deployment is assumed from its name, and said so.
    assert kind("gone-7b9c4-x2k9q") == ("Deployment", "gone", True)
    assert kind("nightly-29123456-x2k9q") == ("CronJob", "nightly", False)
    assert kind("debug") == ("Pod", "debug", False)
    assert "static pod" in str(kind("static-node-1"))
    assert kind("lws-0") == ("LeaderWorkerSet", "lws", False)


def test_pod_name_rule_says_what_it_assumed_or_refuses() -> None:
    o = resolve("llm", "chat-7b9c4-x2k9q", None)
    assert not isinstance(o, str) and (o.kind, o.name, o.assumed) == ("Deployment", "chat", True)
    assert o.source.startswith("ASSUMED from the pod name (no kube-state-metrics series")
    o = resolve("llm", "db-2", OwnerSeries(present=True))
    assert not isinstance(o, str) and (o.kind, o.name) == ("StatefulSet", "db")
    assert "kube-state-metrics has no kube_pod_owner for this pod" in o.source
    assert "fits a DaemonSet and a Job alike" in str(resolve("llm", "embed-xk2vq", None))
    found = resolve("llm", "embed-xk2vq", None, lambda k, ns, n: (k, ns, n) == ("Job", "llm", "embed"))
    assert not isinstance(found, str) and (found.kind, found.name, found.assumed) == ("Job", "embed", True)
    assert "follows no controller's naming" in str(resolve("llm", "scratch", None))


# --- what is patched ------------------------------------------------------------------------------


def test_replicas_that_agree_make_one_patch_with_the_workloads_savings() -> None:
    ps = patch_set([held("chat-7b9c4-x2k9q", "H100-SXM-80GB", "L4-24GB"),
                    held("chat-7b9c4-bcdfg", "H100-SXM-80GB", "L4-24GB")], owners=DEPLOY)  # fmt: skip
    m = only(ps)
    assert (m.outcome, m.owner.kind, m.owner.name, m.gpus, m.pods) == ("patch", "Deployment", "chat", 2, 2)
    # Each GPU saves $12.29 - $0.8048 (catalog list prices): the workload twice that.
    assert m.hourly_savings_dollars == round(2 * (12.29 - 0.8048), 4)
    body = yaml.safe_load(ps.files["llm_deployment_chat.yaml"])
    assert body == {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "chat", "namespace": "llm"},
        "spec": {"template": {"spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"}}}},
    }  # fmt: skip
    assert yaml.safe_load(ps.files["kustomization.yaml"]) == {
        "apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component",
        "patches": [{"path": "llm_deployment_chat.yaml"}]}  # fmt: skip


def test_moves_that_cannot_be_patched_say_why() -> None:
    a, b = "chat-7b9c4-x2k9q", "chat-7b9c4-bcdfg"
    cases = {
        "replicas disagree": [held(a, "H100-SXM-80GB", "L4-24GB"), held(b, "H100-SXM-80GB", "L40S-48GB")],
        "2 GPUs idle": [held(a, "H100-SXM-80GB", "release"), held(b, "H100-SXM-80GB", "L4-24GB")],
        "too little data": [held(a, "H100-SXM-80GB", "L4-24GB"),
                            held(b, "H100-SXM-80GB", "none", verdict="insufficient_data")],
        "the price is an estimate": [held(a, "B200-SXM-180GB", "L40S-48GB")],
        "short of the 54 min a patch needs": [held(a, "H100-SXM-80GB", "L4-24GB", evidence=evidence(1900))],
        "nodes of different types": [
            held(a, "H100-SXM-80GB/1g.10gb", "L4-24GB", container="one"),
            held(a, "H100-SXM-80GB/1g.10gb", "H100-SXM-80GB/1g.20gb", container="two"),
        ],
    }  # fmt: skip
    for words, units in cases.items():
        m = only(patch_set(units, owners=DEPLOY))
        assert m.outcome == "refused" and m.body is None, words
        assert words.replace("2 GPUs idle", "1 of 2 GPUs idle") in m.why, (words, m.why)
    # Under an hour of history in an hour's window: min_history_seconds alone (1800 s) would pass,
    # the window coverage (0.9 x 3600 = 3240 s) does not; with coverage 0 it is patched.
    short = [held(a, "H100-SXM-80GB", "L4-24GB", evidence=evidence(1900))]
    assert only(patch_set(short, owners=DEPLOY, min_window_coverage_ratio=0.0)).outcome == "patch"
    assert (
        only(
            patch_set(cases["the price is an estimate"], owners=DEPLOY, include_estimated_prices=True)
        ).outcome
        == "patch"
    )


def test_a_multi_gpu_move_that_changes_the_count_is_spelled_out_not_patched() -> None:
    change = "4 x H100-SXM-80GB -> 2 x H200-SXM-141GB"
    pod = "tp-7b9c4-x2k9q"
    units = [held(pod, "H100-SXM-80GB", "H200-SXM-141GB", container=c, change=change) for c in "0123"]
    m = only(patch_set(units, include_estimated_prices=True))
    assert (m.outcome, m.change) == ("manual", "4 x H100-SXM-80GB -> 2 x H200-SXM-141GB")
    assert "--tensor-parallel-size" in m.why and "nvidia.com/gpu.product=NVIDIA-H200" in m.why
    assert "## To change by hand" in patch_set(units, include_estimated_prices=True).files["README.md"]
    # The same count on another model is a node move: one patch, each container's count kept.
    change = "2 x A100-SXM-80GB -> 2 x H100-SXM-80GB"
    same = [
        held(pod, "A100-SXM-80GB", "H100-SXM-80GB", container=c, verdict="underprovisioned", change=change)
        for c in ("r0", "r1")
    ]
    m = only(patch_set(same))
    assert m.outcome == "patch" and "the GPU count is kept" in m.why
    assert "containers" not in yaml.safe_load(patch_set(same).files[m.file])["spec"]["template"]["spec"]


def test_owner_kinds_without_a_known_template_are_left_to_a_person() -> None:
    series = OwnerSeries(pods={("llm", "lws-0"): ("LeaderWorkerSet", "lws")}, present=True)
    m = only(patch_set([held("lws-0", "H100-SXM-80GB", "L4-24GB")], owners=series))
    assert m.outcome == "manual" and "LeaderWorkerSet is not a kind this tool patches" in m.why
    assert "nvidia.com/gpu.product=NVIDIA-L4" in m.why


def test_mig_strategies_name_the_slice_differently() -> None:
    units = [held("chat-7b9c4-x2k9q", "H100-SXM-80GB", "H100-SXM-80GB/1g.20gb")]
    mixed = yaml.safe_load(patch_set(units, owners=DEPLOY).files["llm_deployment_chat.yaml"])["spec"][
        "template"
    ]["spec"]
    assert mixed["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    renamed = {"nvidia.com/gpu": None, "nvidia.com/mig-1g.20gb": 1}
    assert mixed["containers"] == [{"name": "server", "resources": {"limits": renamed, "requests": renamed}}]
    single = yaml.safe_load(
        patch_set(units, owners=DEPLOY, mig_strategy="single").files["llm_deployment_chat.yaml"]
    )
    assert single["spec"]["template"]["spec"] == {
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.20gb"}}  # fmt: skip


def test_gpus_of_no_pod_and_rightsized_workloads_make_no_move() -> None:
    ps = patch_set(
        [
            held("", "H100-SXM-80GB", "L4-24GB"),
            held("ok-7b9c4-x2k9q", "L4-24GB", "L4-24GB", verdict="rightsized"),
        ]
    )
    assert ps.moves == () and set(ps.files) == {"kustomization.yaml", "README.md"}
    assert yaml.safe_load(ps.files["kustomization.yaml"])["patches"] == []
