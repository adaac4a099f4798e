"""The catalog's GPU Feature Discovery labels: ``gfd_product`` per GPU (the value GFD writes in
``nvidia.com/gpu.product``: the NVML name with spaces as '-') with its source, and per MIG profile
the value under the device plugin's "single" strategy (``<GPU>-MIG-<profile>``)."""

from __future__ import annotations

import pytest

from rightsizer_core.settings import ConfigError
from rightsizing.catalog import CatalogSettings, load_catalog

# The values GFD writes, from NVIDIA's GFD and device-plugin documentation and values seen on
# clusters; the H100 PCIe's by the same rule from its NVML name.
GFD = {
    "T4-16GB": "Tesla-T4", "L4-24GB": "NVIDIA-L4", "A10G-24GB": "NVIDIA-A10G", "L40S-48GB": "NVIDIA-L40S",
    "A100-SXM-40GB": "NVIDIA-A100-SXM4-40GB", "A100-SXM-80GB": "NVIDIA-A100-SXM4-80GB",
    "H100-PCIe-80GB": "NVIDIA-H100-PCIe", "H100-SXM-80GB": "NVIDIA-H100-80GB-HBM3",
    "H200-SXM-141GB": "NVIDIA-H200", "B200-SXM-180GB": "NVIDIA-B200",
}  # fmt: skip
RTX = {
    "key": "RTX-6000-Ada-48GB", "nvml_names": ["NVIDIA RTX 6000 Ada Generation"], "memory_bytes": "48GiB",
    "memory_bandwidth_bytes_per_second": "960GB/s", "fp16_dense_tflops": 364, "tdp_watts": 300,
    "sm_count": 142, "sm_clock_max_mhz": 2505, "memory_clock_max_mhz": 10001, "pcie_generation": 4,
    "pcie_width": 16, "hourly_price_dollars": 1.1,
}  # fmt: skip


def test_every_built_in_gpu_names_the_label_gfd_writes_and_its_source() -> None:
    catalog = load_catalog()
    assert {g.key: g.gfd_product for g in catalog.all()} == GFD
    assert all("gpu-feature-discovery" in g.gfd_product_source for g in catalog.all())
    a100 = catalog.lookup("A100-SXM-40GB")
    assert a100 is not None
    assert [p.gfd_product for p in a100.mig_profiles][:2] == [
        "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "NVIDIA-A100-SXM4-40GB-MIG-1g.10gb"]  # fmt: skip
    assert all("single MIG strategy" in p.gfd_product_source for g in catalog.all() for p in g.mig_profiles)


def test_an_added_gpu_takes_gfds_rule_or_its_own_label_and_a_bad_one_is_refused() -> None:
    catalog = load_catalog(CatalogSettings(extra_gpus=[RTX]))
    rtx = catalog.lookup("RTX-6000-Ada-48GB")
    assert rtx is not None and rtx.gfd_product == "NVIDIA-RTX-6000-Ada-Generation"
    assert "first NVML name" in rtx.gfd_product_source
    labelled = CatalogSettings(extra_gpus=[{**RTX, "gfd_product": "RTX6000Ada"}])
    own = load_catalog(labelled).lookup("RTX-6000-Ada-48GB")
    assert own is not None and own.gfd_product == "RTX6000Ada"
    for bad in ("has space", "x" * 64, "-lead", "a/b"):
        with pytest.raises(ConfigError, match=r"gfd_product: .* is not a Kubernetes label value"):
            load_catalog(CatalogSettings(extra_gpus=[{**RTX, "gfd_product": bad}]))
