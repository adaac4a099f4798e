"""Patch generation figures: CPU seconds to plan and write the patch set (``build_patches``: owners,
moves, each patch's YAML, kustomization.yaml and README.md) for N synthetic workloads, each one
single-GPU pod on an H100 recommended the L4 (every one patched: the most work per workload), with
owners from kube-state-metrics-shaped series. What ``rightsizer report --format patches`` adds to a
report after its queries, and the exporter's ``/api/v1/patches`` per read (a node: a few workloads).
Twice: from the measurements alone, and with each workload's manifest (``--manifests``: a Deployment
selecting ``p5.48xlarge`` by instance type, its requests checked against the L4 shapes, the type
rewritten).

    .venv/bin/python bench/patches.py [--workloads 100 1000 4000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parent.parent)

from rightsizing.catalog import load_catalog  # noqa: E402
from rightsizing.evidence import Evidence  # noqa: E402
from rightsizing.patches.build import build_patches  # noqa: E402
from rightsizing.patches.manifests import Manifests  # noqa: E402
from rightsizing.patches.owners import OwnerSeries  # noqa: E402
from rightsizing.patches.plan import Context, Held  # noqa: E402
from rightsizing.patches.settings import PatchSettings  # noqa: E402
from rightsizing.verdicts import Assessment  # noqa: E402

HOUR = 3600.0


def fleet(n: int) -> tuple[list[Held], OwnerSeries]:
    ev = Evidence(
        samples=240, history_seconds=HOUR - 15, window_seconds=HOUR, model="NVIDIA H100 80GB HBM3",
        mig_profile=None, memory_total_bytes=80 * 2**30, memory_peak_bytes=18.5 * 2**30,
        memory_p95_bytes=None, activity_source="sm_active", activity_p50=0.05, activity_p95=0.07,
        activity_p99=0.08, activity_recent_max=0.07,
    )  # fmt: skip
    a = Assessment("overprovisioned", "fits L4-24GB", (), "L4-24GB", "H100-SXM-80GB", 11.49, 0.5,
                   price_source="list")  # fmt: skip
    held, pods, replicasets = [], {}, {}
    for i in range(n):
        ns, pod, rs = f"team-{i % 50}", f"svc-{i}-7b9c4-x2k9q", f"svc-{i}-7b9c4"
        held.append(Held(ns, pod, "server", f"GPU-{i}", a, ev))
        pods[(ns, pod)] = ("ReplicaSet", rs)
        replicasets[(ns, rs)] = ("Deployment", f"svc-{i}")
    return held, OwnerSeries(pods, replicasets, {}, True)


def manifests(n: int) -> Manifests:
    server = {"name": "server", "image": "vllm/vllm-openai:v0.6.3",
              "resources": {"requests": {"cpu": "3", "memory": "12Gi"}, "limits": {"nvidia.com/gpu": 1}}}
    spec = {"nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"}, "containers": [server]}
    return Manifests([(f"svc-{i}.yaml", {
        "apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": {"spec": spec}},
        "metadata": {"name": f"svc-{i}", "namespace": f"team-{i % 50}"}}) for i in range(n)])  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", type=int, nargs="+", default=[100, 1000, 4000])
    args = p.parse_args()
    catalog = load_catalog()
    print("patch set built in-process from synthetic workloads (H100 -> L4, owners from KSM-shaped series)")
    for n in args.workloads:
        held, owners = fleet(n)
        for read in (None, manifests(n)):
            ctx = Context(1767225600.0, HOUR, catalog, PatchSettings(), "bench", owners, "ksm", read)
            started = time.process_time()
            ps = build_patches(held, ctx)
            cpu = time.process_time() - started
            size = sum(len(t) for t in ps.files.values())
            how = "measurements only" if read is None else "with manifests  "
            print(f"{n:6d} workloads, {how}: {len(ps.files) - 2:6d} patches, {size / 2**20:6.1f} MiB, "
                  f"{cpu:6.2f} s CPU ({1000 * cpu / n:.2f} ms per workload)")  # fmt: skip


if __name__ == "__main__":
    main()
