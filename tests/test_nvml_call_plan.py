"""The NVML call plan, counted in the C double's trace: values that never change are read once per
NVML initialisation, slow values on their cadence, the per-cycle fields in one batched
nvmlDeviceGetFieldValues call, and nothing else each cycle."""

from __future__ import annotations

from pathlib import Path

from nvmldouble import NvmlDouble, exporter_args, gpu_values, scrape, scrape_until, value
from servers import exporter, wait_for

STATIC_CALLS = {  # per GPU and initialisation: SM and memory maximum clocks, maximum PCIe link, NUMA node
    "nvmlDeviceGetMaxClockInfo": 2,
    "nvmlDeviceGetMaxPcieLinkGeneration": 1,
    "nvmlDeviceGetMaxPcieLinkWidth": 1,
    "nvmlDeviceGetNumaNodeId": 1,
}
# What one cycle reads of a GPU without GPM or MIG (GPM and MIG add their own calls).
PER_CYCLE = {
    "nvmlDeviceGetUtilizationRates": 1,
    "nvmlDeviceGetMemoryInfo_v2": 1,
    "nvmlDeviceGetTemperatureV": 1,
    "nvmlDeviceGetFieldValues": 1,  # memory temperature, ECC totals (energy and PCIe replays: slow)
    "nvmlDeviceGetPowerUsage": 1,
    "nvmlDeviceGetClockInfo": 2,
    "nvmlDeviceGetEncoderUtilization": 1,
    "nvmlDeviceGetDecoderUtilization": 1,
    "nvmlDeviceGetCurrentClocksEventReasons": 1,
    "nvmlDeviceGetComputeRunningProcesses_v3": 2,  # nvidia-ml-py asks for the count first
}


def static_counts(double: NvmlDouble, slot: int) -> dict[str, int]:
    return {call: double.call_count(call, slot) for call in STATIC_CALLS}


def cycles(double: NvmlDouble, slot: int) -> int:
    return double.call_count("nvmlDeviceGetUtilizationRates", slot)


def test_static_values_are_read_once_per_initialisation(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    nvml_double.set({"gpus": 2, **gpu_values(0), **gpu_values(1)})
    with exporter(exporter_args(tmp_path), env=nvml_double.env()) as proc:
        wait_for(lambda: cycles(nvml_double, 1) >= 8, 20, what="8 cycles")
        assert static_counts(nvml_double, 0) == STATIC_CALLS
        assert static_counts(nvml_double, 1) == STATIC_CALLS
        samples = scrape(proc.url)  # read once, published every cycle
        assert value(samples, "rightsizer_gpu_sm_clock_max_hertz", gpu="0") == 1_980e6
        assert value(samples, "rightsizer_gpu_sm_clock_max_hertz", gpu="1") == 1_980e6

        # GPU 0 is lost and comes back: NVML is initialised again and its static values read again.
        nvml_double.gpu(0, lost=1)
        scrape_until(proc.url, lambda s: value(s, "rightsizer_gpu_up", gpu="0") == 0, what="GPU 0 down")
        nvml_double.gpu(0, lost=None, clock__sm_max=2_100)
        scrape_until(
            proc.url,
            lambda s: value(s, "rightsizer_gpu_sm_clock_max_hertz", gpu="0") == 2_100e6,
            what="GPU 0 back with its static values read again",
        )
        now = cycles(nvml_double, 1)
        wait_for(lambda: cycles(nvml_double, 1) >= now + 5, 20, what="5 more cycles")
        assert static_counts(nvml_double, 0) == {k: 2 * n for k, n in STATIC_CALLS.items()}
        assert static_counts(nvml_double, 1) == STATIC_CALLS  # GPU 1 never went down


def test_each_cycle_makes_only_the_planned_calls(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    nvml_double.set({"gpus": 1, **gpu_values(0)})
    with exporter(exporter_args(tmp_path, slow_interval_seconds=3600), env=nvml_double.env()):
        wait_for(lambda: cycles(nvml_double, 0) >= 3, 20, what="3 cycles")
        before = nvml_double.calls()
        wait_for(lambda: cycles(nvml_double, 0) >= before[("nvmlDeviceGetUtilizationRates", "0")] + 10, 20,
                 what="10 more cycles")  # fmt: skip
        after = nvml_double.calls()
    made = {fn: after[(fn, slot)] - before[(fn, slot)] for fn, slot in after if slot == "0"}
    made = {fn: n for fn, n in made.items() if n}
    n = made["nvmlDeviceGetUtilizationRates"]
    # Cycles may straddle a reading of the trace by one: every call made n or n - 1 times per unit.
    assert set(made) == set(PER_CYCLE), sorted(set(made) ^ set(PER_CYCLE))
    for fn, per_cycle in PER_CYCLE.items():
        assert per_cycle * (n - 1) <= made[fn] <= per_cycle * (n + 1), (fn, made[fn], n)
    assert nvml_double.call_count("nvmlDeviceGetTotalEccErrors", 0) == 0  # in the field values call


def test_energy_and_pcie_replay_counters_are_read_on_the_slow_cadence(
    nvml_double: NvmlDouble, tmp_path: Path
) -> None:
    """On an H200 (driver 580) one read of the energy counter costs 4 ms of CPU, 2,000 times a power
    reading, and the PCIe replay counter 0.15 ms: both are counters, read on the slow cadence."""
    nvml_double.set({"gpus": 1, **gpu_values(0)})
    with exporter(exporter_args(tmp_path, slow_interval_seconds=3600), env=nvml_double.env()) as proc:
        scrape_until(proc.url, lambda s: value(s, "DCGM_FI_DEV_POWER_USAGE", gpu="0") == 250.5, what="first")
        nvml_double.gpu(0, energy_mj=223_456_789, pcie__replay=9, power_mw=300_000)
        samples = scrape_until(
            proc.url, lambda s: value(s, "DCGM_FI_DEV_POWER_USAGE", gpu="0") == 300.0, what="new power"
        )
        now = cycles(nvml_double, 0)
        wait_for(lambda: cycles(nvml_double, 0) >= now + 5, 20, what="5 more cycles")
        samples = scrape(proc.url)
        assert value(samples, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu="0") == 123_456_789
        assert value(samples, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", gpu="0") == 7
    with exporter(exporter_args(tmp_path, slow_interval_seconds=1), env=nvml_double.env()) as proc:
        samples = scrape_until(
            proc.url,
            lambda s: value(s, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu="0") == 223_456_789,
            what="energy on a 1 s slow cadence",
        )
        assert value(samples, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", gpu="0") == 9
