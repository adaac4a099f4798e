"""The GPU catalog: published figures, lookups, candidates, and user overrides from the config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from exporter.config import CatalogSettings, load_config
from rightsizer_core.settings import ConfigError, build
from rightsizing.catalog import DATA_FILE, load_catalog, read_catalog_file

GIB = 2**30

# Advertised framebuffer sizes (GiB) from the vendors' datasheets.
MEMORY_GIB = {
    "T4-16GB": 16,
    "L4-24GB": 24,
    "A10G-24GB": 24,
    "L40S-48GB": 48,
    "A100-SXM-40GB": 40,
    "A100-SXM-80GB": 80,
    "H100-PCIe-80GB": 80,
    "H100-SXM-80GB": 80,
    "H200-SXM-141GB": 141,
    "B200-SXM-180GB": 180,
}

NVML_NAMES = {
    "Tesla T4": "T4-16GB",
    "NVIDIA L4": "L4-24GB",
    "NVIDIA A10G": "A10G-24GB",
    "NVIDIA L40S": "L40S-48GB",
    "NVIDIA A100-SXM4-40GB": "A100-SXM-40GB",
    "NVIDIA A100-SXM4-80GB": "A100-SXM-80GB",
    "NVIDIA H100 PCIe": "H100-PCIe-80GB",
    "NVIDIA H100 80GB HBM3": "H100-SXM-80GB",
    "NVIDIA H200": "H200-SXM-141GB",
    "NVIDIA B200": "B200-SXM-180GB",
}

EXTRA = {
    "key": "RTX-6000-Ada-48GB",
    "nvml_names": ["NVIDIA RTX 6000 Ada Generation"],
    "architecture": "Ada Lovelace",
    "memory_bytes": "48GiB",
    "memory_bandwidth_bytes_per_second": "960GB/s",
    "fp16_dense_tflops": 364,
    "fp8_dense_tflops": 728,
    "int8_dense_tops": 728,
    "tdp_watts": 300,
    "sm_count": 142,
    "sm_clock_max_mhz": 2505,
    "memory_clock_max_mhz": 10001,
    "pcie_generation": 4,
    "pcie_width": 16,
    "hourly_price_dollars": 1.1,
    "price_source": "our contract, 2025",
}


def settings(**kv: object) -> CatalogSettings:
    return build(CatalogSettings, kv, "catalog")


def test_every_required_gpu_with_exact_memory_and_lookup_by_nvml_name() -> None:
    cat = load_catalog()
    assert sorted(g.key for g in cat.all()) == sorted(MEMORY_GIB)
    for key, gib in MEMORY_GIB.items():
        gpu = cat.lookup(key)
        assert gpu is not None and gpu.key == key
        assert gpu.memory_bytes == gib * GIB, key
    for nvml_name, key in NVML_NAMES.items():
        found = cat.lookup(nvml_name)
        assert found is not None and found.key == key, nvml_name
        assert nvml_name in found.nvml_names
        assert cat.lookup(nvml_name.upper()) is found  # case-insensitive
    assert cat.lookup("L4") is cat.lookup("NVIDIA L4")  # vendor prefix optional
    assert cat.lookup("h100-sxm-80gb") is cat.lookup("NVIDIA H100 80GB HBM3")
    assert cat.lookup("NVIDIA GeForce GTX 1080") is None


def test_published_figures_are_sane() -> None:
    for gpu in load_catalog().all():
        assert 200e9 <= gpu.memory_bandwidth_bytes_per_second <= 10e12, gpu.key
        assert 50 <= gpu.fp16_dense_tflops <= 3000, gpu.key
        if gpu.fp8_dense_tflops is not None:  # FP8 doubles FP16 on every GPU that has it
            assert gpu.fp8_dense_tflops == pytest.approx(2 * gpu.fp16_dense_tflops, rel=0.03), gpu.key
        assert gpu.int8_dense_tops is not None and gpu.int8_dense_tops >= gpu.fp16_dense_tflops
        assert 60 <= gpu.tdp_watts <= 1200 and gpu.sm_count > 0
        assert 1000 <= gpu.sm_clock_max_mhz <= 3000 and gpu.memory_clock_max_mhz > 1000
        assert gpu.pcie_generation in (3, 4, 5) and gpu.pcie_width == 16
        assert gpu.hourly_price_dollars > 0 and len(gpu.price_source) > 20
        assert gpu.gpm_supported == (gpu.architecture in ("Hopper", "Blackwell")), gpu.key
        for p in gpu.mig_profiles:
            assert p.memory_bytes <= gpu.memory_bytes and 0 < p.sm_fraction <= 1 and p.max_instances >= 1
            slices = int(p.name.split("g.")[0])
            assert p.sm_fraction == pytest.approx(slices / 7)
            assert p.max_instances * p.sm_fraction <= 1 + 1e-9
    cat = load_catalog()
    # The datasheet figures the seed article quotes.
    assert cat.lookup("L40S-48GB").memory_bandwidth_bytes_per_second == 864e9  # type: ignore[union-attr]
    assert cat.lookup("H100-SXM-80GB").pcie_bytes_per_second == pytest.approx(63e9, rel=0.01)  # type: ignore[union-attr]


def test_mig_profiles_of_a100_and_h100() -> None:
    cat = load_catalog()
    for key, names in {
        "A100-SXM-40GB": {"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"},
        "A100-SXM-80GB": {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
        "H100-SXM-80GB": {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
        "H200-SXM-141GB": {"1g.18gb", "3g.71gb", "7g.141gb"},
    }.items():
        gpu = cat.lookup(key)
        assert gpu is not None and names <= {p.name for p in gpu.mig_profiles}, key
    one = cat.lookup("H100-SXM-80GB").mig_profile("1g.10gb")  # type: ignore[union-attr]
    assert one is not None and one.memory_bytes == 10 * GIB and one.max_instances == 7
    assert cat.lookup("L4").mig_profiles == ()  # type: ignore[union-attr]


def test_candidates_whole_gpus_and_mig_profiles_priced_by_the_share_they_block() -> None:
    cat = load_catalog()
    cands = cat.candidates()
    prices = [c.hourly_price_dollars for c in cands]
    assert prices == sorted(prices)
    whole = {c.key for c in cands if c.mig is None}
    assert whole == set(MEMORY_GIB)
    h100 = cat.lookup("H100-SXM-80GB")
    assert h100 is not None
    mig = cat.candidate("h100-sxm-80gb/3G.40GB")
    assert mig is not None and mig.gpu is h100 and mig.mig is not None
    # 3g.40gb: 3 of 7 compute slices but 4 of 8 memory slices, so half the GPU ($12.29 / 2).
    assert mig.hourly_price_dollars == pytest.approx(6.145)
    assert mig.memory_bytes == 40 * GIB and mig.compute_fraction == pytest.approx(3 / 7)
    assert mig.memory_bandwidth_bytes_per_second == pytest.approx(h100.memory_bandwidth_bytes_per_second / 2)
    assert mig.fp16_dense_tflops == pytest.approx(h100.fp16_dense_tflops * 3 / 7)
    assert cat.candidate("NVIDIA L4") is cat.candidate("L4-24GB")
    assert cat.candidate("H100-SXM-80GB/9g.99gb") is None
    assert "x 0.5, the larger of its memory slices (4/8) and compute slices (3/7)" in mig.price_source
    assert mig.price_source.endswith(h100.price_source)
    # Where a 7B model (about 18.5 GiB with its KV cache, plus a 15 % margin) can go, cheapest first.
    need = 18.5 * GIB * 1.15
    assert next(c for c in cands if c.memory_bytes >= need).key == "L4-24GB"


def test_price_override_and_extra_gpu() -> None:
    cat = load_catalog(settings(prices={"NVIDIA L4": 0.5, "H100-SXM-80GB": 7.0}, extra_gpus=[EXTRA]))
    l4 = cat.lookup("L4-24GB")
    assert l4 is not None and l4.hourly_price_dollars == 0.5 and "catalog.prices" in l4.price_source
    assert cat.candidate("H100-SXM-80GB/1g.10gb").hourly_price_dollars == pytest.approx(1.0)  # type: ignore[union-attr]
    rtx = cat.lookup("NVIDIA RTX 6000 Ada Generation")
    assert rtx is not None and rtx.memory_bytes == 48 * GIB and rtx.memory_bandwidth_bytes_per_second == 960e9
    assert cat.candidate("RTX-6000-Ada-48GB") is not None
    assert load_catalog().lookup("L4-24GB").hourly_price_dollars == 0.8048  # type: ignore[union-attr]


def test_extra_gpu_replaces_builtin_with_same_key(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(yaml.safe_dump({"gpus": [{**EXTRA, "key": "L4-24GB", "nvml_names": []}]}))
    cat = load_catalog(settings(extra_gpus_file=str(path)))
    l4 = cat.lookup("l4-24gb")
    assert l4 is not None and l4.hourly_price_dollars == 1.1 and l4.memory_bandwidth_bytes_per_second == 960e9
    assert len(cat.all()) == len(MEMORY_GIB)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"prices": {"H999": 1.0}}, "catalog.prices: unknown GPU 'H999'"),
        ({"prices": {"L4": -1}}, "catalog.prices.L4: must be at least 0"),
        ({"prices": {"L4": "cheap"}}, "catalog.prices.L4: must be a number"),
        ({"extra_gpus": [{**EXTRA, "memory_bytes": "lots"}]},
         "catalog.extra_gpus[0] (RTX-6000-Ada-48GB).memory_bytes: must be a number of bytes"),
        ({"extra_gpus": [{k: v for k, v in EXTRA.items() if k != "tdp_watts"}]},
         "catalog.extra_gpus[0] (RTX-6000-Ada-48GB): tdp_watts is required"),
        ({"extra_gpus": [{**EXTRA, "colour": "green"}]},
         "catalog.extra_gpus[0] (RTX-6000-Ada-48GB): unknown key 'colour'"),
        ({"extra_gpus": [{**EXTRA, "mig_profiles": [{"name": "1g.99gb", "memory_bytes": "99GiB",
                                                      "sm_fraction": "1/7", "max_instances": 7}]}]},
         "mig_profiles[0].memory_bytes: 106300440576 is more than the GPU's 51539607552"),
        ({"extra_gpus": [{**EXTRA, "mig_profiles": [{"name": "1g.5gb", "memory_bytes": "5GiB",
                                                      "sm_fraction": "8/7", "max_instances": 7}]}]},
         "mig_profiles[0].sm_fraction: must be above 0 and at most 1"),
        ({"extra_gpus": ["H100"]}, "catalog.extra_gpus[0]: must be a mapping"),
        ({"extra_gpus_file": "/nonexistent/gpus.yaml"},
         "catalog.extra_gpus_file: /nonexistent/gpus.yaml: cannot read"),
    ],
)
def test_bad_overrides_name_the_entry_and_key(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        settings(**overrides)
    assert message in str(info.value)


def test_bad_catalog_entry_in_exporter_config_file_names_file_and_key(tmp_path: Path) -> None:
    cfg = tmp_path / "exporter.yaml"
    cfg.write_text("catalog:\n  prices:\n    L4: 0.61\n")
    assert load_config(str(cfg), {}, environ={}).catalog.prices == {"L4": 0.61}
    cfg.write_text("catalog:\n  extra_gpus:\n    - key: X1\n      memory_bytes: 8GiB\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(cfg), {}, environ={})
    assert str(info.value).startswith(f"{cfg}: ") and "catalog.extra_gpus[0] (X1): " in str(info.value)


def test_data_file_round_trips_and_rejects_unknown_top_level_key(tmp_path: Path) -> None:
    assert len(read_catalog_file(DATA_FILE)) == len(MEMORY_GIB)
    bad = tmp_path / "catalog.yaml"
    bad.write_text(DATA_FILE.read_text() + "\nvendors: []\n")
    with pytest.raises(ConfigError, match=r"catalog.yaml: unknown key 'vendors'"):
        read_catalog_file(bad)
    bad.write_text(DATA_FILE.read_text().replace("memory_bytes: 24GiB", "memory_bytes: 24 furlongs", 1))
    with pytest.raises(ConfigError, match=r"gpus\[1\] \(L4-24GB\)\.memory_bytes: must be a number of bytes"):
        read_catalog_file(bad)


# What NVML reports as memory.total (MiB), from public nvidia-smi outputs (sources in catalog.yaml).
# GDDR6 with ECC on keeps 15/16 of the nominal size: the T4's 16 GiB = 16384 MiB shows 16384 x 15/16.
USABLE_MIB = {
    "T4-16GB": 16384 * 15 // 16,
    "L4-24GB": 23034,
    "A10G-24GB": 23028,
    "L40S-48GB": 46068,
    "A100-SXM-40GB": 40960,
    "A100-SXM-80GB": 81920,
    "H100-PCIe-80GB": 81559,
    "H100-SXM-80GB": 81559,
    "H200-SXM-141GB": 143771,
    "B200-SXM-180GB": 183359,
}
# No public list price (price_source says how each was derived).
ESTIMATED_PRICES = {"H100-PCIe-80GB", "H200-SXM-141GB", "B200-SXM-180GB"}


def test_every_gpu_has_nvml_usable_memory_with_a_source() -> None:
    cat = load_catalog()
    assert cat.lookup("T4-16GB").usable_memory == 15360 * 2**20  # type: ignore[union-attr]
    for gpu in cat.all():
        assert gpu.usable_memory_bytes == USABLE_MIB[gpu.key] * 2**20, gpu.key
        assert 0 < gpu.usable_memory <= gpu.memory_bytes, gpu.key
        assert gpu.usable_memory_source and gpu.usable_memory_source != "nominal size", gpu.key
        if gpu.architecture in ("Turing", "Ampere", "Ada Lovelace") and "A100" not in gpu.key:
            # GDDR6 with ECC: 15/16 of the nominal size, less at most a few MiB of driver reserve.
            assert gpu.memory_bytes * 15 / 16 - 16 * 2**20 <= gpu.usable_memory <= gpu.memory_bytes * 15 / 16
        whole = cat.candidate(gpu.key)
        assert whole is not None and whole.usable_memory == gpu.usable_memory


def test_every_mig_profile_has_the_instance_memory_nvml_reports() -> None:
    cat = load_catalog()
    for gpu in cat.all():
        if gpu.mig_profiles:
            assert "mig -lgip" in gpu.mig_usable_memory_source, gpu.key
        for p in gpu.mig_profiles:
            assert 0 < p.usable_memory_bytes <= p.memory_bytes, (gpu.key, p.name)
            assert p.usable_memory_bytes <= gpu.usable_memory, (gpu.key, p.name)
            cand = cat.candidate(f"{gpu.key}/{p.name}")
            assert cand is not None and cand.usable_memory == p.usable_memory_bytes
    # nvidia-smi mig -lgip on an H200 (NVIDIA/mig-parted issue #120): 1g.18gb has 16.00 GiB.
    h200 = cat.candidate("H200-SXM-141GB/1g.18gb")
    assert h200 is not None and h200.usable_memory == 16 * GIB and h200.memory_bytes == 18 * GIB
    a100 = cat.candidate("A100-SXM-40GB/1g.5gb")  # 4.75 GiB on A100-SXM4-40GB
    assert a100 is not None and a100.usable_memory == int(4.75 * GIB)


def test_estimated_prices_are_marked_and_configured_prices_are_not() -> None:
    cat = load_catalog()
    assert {g.key for g in cat.all() if g.price_estimated} == ESTIMATED_PRICES
    for gpu in cat.all():
        assert gpu.price_estimated == gpu.price_source.startswith("estimate:"), gpu.key
        assert cat.candidate(gpu.key).price_estimated == gpu.price_estimated  # type: ignore[union-attr]
    priced = load_catalog(settings(prices={"B200-SXM-180GB": 9.0}))
    assert not priced.lookup("B200-SXM-180GB").price_estimated  # type: ignore[union-attr]
    assert not priced.candidate("B200-SXM-180GB/1g.23gb").price_estimated  # type: ignore[union-attr]


def test_user_gpus_without_usable_memory_fall_back_to_the_nominal_size() -> None:
    rtx = load_catalog(settings(extra_gpus=[EXTRA])).lookup("RTX-6000-Ada-48GB")
    assert rtx is not None and rtx.usable_memory == 48 * GIB and rtx.usable_memory_source == "nominal size"
    given = load_catalog(settings(extra_gpus=[{**EXTRA, "usable_memory_bytes": "46068MiB",
                                               "usable_memory_source": "our nvidia-smi"}]))  # fmt: skip
    assert given.candidate("RTX-6000-Ada-48GB").usable_memory == 46068 * 2**20  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"usable_memory_bytes": "49GiB", "usable_memory_source": "x"},
         ".usable_memory_bytes: 52613349376 is more than the GPU's memory_bytes 51539607552"),
        ({"usable_memory_bytes": "46068MiB"}, ": usable_memory_source is required with usable_memory_bytes"),
        ({"usable_memory_bytes": "most", "usable_memory_source": "x"},
         ".usable_memory_bytes: must be a number"),
        ({"price_estimated": "maybe"}, "price_estimated"),
        ({"mig_profiles": [{"name": "1g.12gb", "memory_bytes": "12GiB", "usable_memory_bytes": "13GiB",
                            "sm_fraction": "1/4", "max_instances": 4}]},
         "mig_profiles[0].usable_memory_bytes: 13958643712 is more than the profile's memory_bytes"),
    ],
)  # fmt: skip
def test_bad_usable_memory_entries_are_refused(extra: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        settings(extra_gpus=[{**EXTRA, **extra}])
    assert message in str(info.value)


# NVIDIA's MIG user guide (Supported MIG Profiles), A100-SXM4-80GB: "Fraction of Memory" and
# "Fraction of SMs" per profile. A profile is priced at the larger of the two: the share it blocks.
A100_80_SLICES = {
    "1g.10gb": (1, 1), "1g.20gb": (2, 1), "2g.20gb": (2, 2),
    "3g.40gb": (4, 3), "4g.40gb": (4, 4), "7g.80gb": (8, 7),
}


def test_mig_prices_take_the_larger_of_memory_and_compute_share() -> None:
    cat = load_catalog()
    for name, (mem, sm) in A100_80_SLICES.items():
        c = cat.candidate(f"A100-SXM-80GB/{name}")
        assert c is not None and c.mig is not None
        assert c.mig.memory_slices == mem, name
        assert c.hourly_price_dollars == pytest.approx(5.1207 * max(mem / 8, sm / 7), abs=1e-6), name
    # The case: a 1g.20gb fits 4 to a GPU, so it costs a quarter ($1.28), not a seventh ($0.73),
    # and no longer undercuts an L4 ($0.8048) or an A10G ($1.006) that holds as much.
    slice_ = cat.candidate("A100-SXM-80GB/1g.20gb")
    assert slice_ is not None and slice_.hourly_price_dollars == pytest.approx(1.280175)
    for whole in ("L4-24GB", "A10G-24GB"):
        c = cat.candidate(whole)
        assert c is not None and c.hourly_price_dollars < slice_.hourly_price_dollars
    # Every built-in profile: 8 slices of memory in all never exceed the GPU, and 1g profiles that
    # fit 4 to a GPU hold 2 slices.
    for c in cat.candidates():
        if c.mig is not None:
            assert c.mig.memory_slices * c.mig.max_instances <= 8, c.key
            assert c.hourly_price_dollars == pytest.approx(
                c.gpu.hourly_price_dollars * max(c.mig.memory_slices / 8, c.mig.sm_fraction), abs=1e-6
            )


def test_extra_gpu_mig_memory_slices_default_from_memory_and_are_bounded() -> None:
    entry = {**EXTRA, "key": "X-80GB", "memory_bytes": "80GiB", "mig_profiles": [
        {"name": "1g.20gb", "memory_bytes": "20GiB", "sm_fraction": "1/7", "max_instances": 4}]}
    cat = load_catalog(settings(extra_gpus=[entry]))
    c = cat.candidate("X-80GB/1g.20gb")
    assert c is not None and c.mig is not None and c.mig.memory_slices == 2
    bad = {**entry, "mig_profiles": [{**entry["mig_profiles"][0], "memory_slices": 9}]}
    with pytest.raises(ConfigError, match="memory_slices"):
        load_catalog(settings(extra_gpus=[bad]))
