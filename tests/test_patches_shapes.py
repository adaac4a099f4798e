"""The host shapes catalog (rightsizing/patches/shapes.yaml): each cloud's shapes per GPU, as the
clouds publish them, with their sources; the share a pod may take; the allocatable figures derived
for GCE and Azure with GKE's reservation rule. Expected values are copied from the published pages
named in the file (Karpenter's instance-types reference, Compute Engine's GPU machine types,
Microsoft Learn's VM sizes), not from the code."""

from __future__ import annotations

from pathlib import Path

from patches_units import CATALOG, held, patch_set

import rightsizing.patches.shapes as shapes_module
from rightsizing.patches.manifests import Manifests
from rightsizing.patches.owners import OwnerSeries
from rightsizing.patches.shapes import load_shapes

MIB = 2**20


def test_published_shapes_are_in_the_catalog_as_published() -> None:
    s = load_shapes()
    # (type, GPU, GPUs, vCPUs, memory MiB, allocatable millicores, allocatable MiB)
    published = {
        "g6.xlarge": ("L4-24GB", 1, 4, 16384, 3920, 14162),  # Karpenter's reference
        "g4dn.xlarge": ("T4-16GB", 1, 4, 16384, 3920, 14481),
        "g6e.xlarge": ("L40S-48GB", 1, 4, 32768, 3920, 29317),
        "p4d.24xlarge": ("A100-SXM-40GB", 8, 96, 1179648, 95690, 1082712),
        "p4de.24xlarge": ("A100-SXM-80GB", 8, 96, 1179648, 95690, 1082712),
        "p5.4xlarge": ("H100-SXM-80GB", 1, 16, 262144, 15890, 240830),
        "p5.48xlarge": ("H100-SXM-80GB", 8, 192, 2097152, 191450, 1938410),
        "p6-b200.48xlarge": ("B200-SXM-180GB", 8, 192, 2097152, 191450, 1937332),
    }
    for name, want in published.items():
        x = s.by_name(name)
        assert (
            x is not None and (x.gpu, x.gpus, x.vcpus, x.memory_mib, x.cpu_millis, x.allocatable_mib) == want
        )
    # GCE and Azure publish vCPUs and memory; the allocatable comes from GKE's rule: for 16 GiB,
    # 25 % of 4 GiB + 20 % of 4 GiB + 10 % of 8 GiB + 100 MiB = 2,762 MiB; CPU 60 + 10 + 10 millicores.
    g2 = s.by_name("g2-standard-4")
    assert g2 is not None and (g2.gpu, g2.vcpus, g2.memory_mib) == ("L4-24GB", 4, 16384)
    assert (g2.cpu_millis, g2.allocatable_mib) == (3920, int(16384 - 1024 - 819.2 - 819.2 - 100))
    assert dict(g2.labels)["cloud.google.com/gke-accelerator"] == "nvidia-l4"
    assert (
        dict(s.by_name("a3-megagpu-8g").labels)["cloud.google.com/gke-accelerator"] == "nvidia-h100-mega-80gb"
    )  # type: ignore[union-attr]
    nd = s.by_name("Standard_ND96amsr_A100_v4")
    assert nd is not None and (nd.gpu, nd.gpus, nd.vcpus, nd.memory_mib) == (
        "A100-SXM-80GB",
        8,
        96,
        1900 * 1024,
    )
    # Each catalog GPU has an AWS host; GKE offers no A10G, L40S or H100 PCIe; Azure no L4.
    for gpu in CATALOG.all():
        assert s.of("aws", gpu.key) or gpu.key == "H100-PCIe-80GB", gpu.key
    assert not s.of("gcp", "L40S-48GB") and not s.of("gcp", "A10G-24GB") and not s.of("azure", "L4-24GB")
    # Karpenter's a100 covers both A100s; the memory label tells them apart.
    assert sorted(s.aws_gpus("a100")) == ["A100-SXM-40GB", "A100-SXM-80GB"]
    assert (s.gpu_memory["A100-SXM-40GB"], s.gpu_memory["A100-SXM-80GB"]) == ("40960", "81920")


def test_a_pods_share_of_a_multi_gpu_host() -> None:
    p5 = load_shapes().by_name("p5.48xlarge")
    assert p5 is not None
    # One H100 of eight: 191.45 / 8 = 23.93 CPUs and 1,938,410 / 8 MiB = 236.6 GiB.
    assert p5.holds(1, 23_900, 236 * 2**30) and not p5.holds(1, 24_000, 10 * 2**30)
    assert not p5.holds(1, 1000, 237 * 2**30) and p5.holds(2, 47_000, 470 * 2**30)


def test_the_file_names_its_sources_and_their_dates() -> None:
    lines = (Path(shapes_module.__file__).parent / "shapes.yaml").read_text().splitlines()
    text = " ".join(line.lstrip("# ").strip() for line in lines if line.startswith("#"))
    for words in ("aws/karpenter-provider-aws", "instance-types.md", "commit 1d927085dd81", "2026-08-21",
                  "GPU machine types", "About GPUs in GKE", "Microsoft Learn", "as read on 2026-11-27",
                  "Plan GKE Standard node sizes"):  # fmt: skip
        assert words in text, words


def test_a_gke_mig_partition_is_left_to_a_person() -> None:
    owners = OwnerSeries(pods={("llm", "chat-0"): ("StatefulSet", "chat")}, present=True)
    container = {"name": "server", "resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}}}
    spec = {"nodeSelector": {"cloud.google.com/gke-gpu-partition-size": "1g.10gb"}, "containers": [container]}
    obj = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "chat", "namespace": "llm"},
           "spec": {"template": {"spec": spec}}}  # fmt: skip
    ps = patch_set([held("chat-0", "H100-SXM-80GB/1g.10gb", "H100-SXM-80GB/1g.20gb")], owners=owners,
                   manifests=Manifests([("chat.yaml", obj)]))  # fmt: skip
    (m,) = ps.moves
    assert m.outcome == "manual" and "cloud.google.com/gke-gpu-partition-size=1g.10gb" in m.why
    assert MIB  # the unit the published memory figures are in
