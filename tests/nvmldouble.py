"""The libnvidia-ml.so.1 test double: build it, control it, read its call trace.

The double (``tests/nvml_double/*.c``) is compiled against NVIDIA's own ``nvml.h`` from the PyPI
package ``nvidia-nvml-dev`` (test extra), so every struct layout and constant is the driver's.
A process loads it instead of the real library when ``LD_LIBRARY_PATH`` names its directory;
nvidia-ml-py then talks to it exactly as to a driver. The double answers from a control file
(``NVML_DOUBLE_CONTROL``; keys documented in ``nvml_double/control.c``) that a test may rewrite
at any time, and appends every call to a trace file (``NVML_DOUBLE_TRACE``). It also counts calls
per GPU slot in a small shared file (``NVML_DOUBLE_COUNTERS``, read by ``call_totals``), which costs
no system call, for benchmarks.

Build by hand: ``python tests/nvmldouble.py OUTDIR`` (prints the library's path).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import struct
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from servers import http_get, wait_for

SOURCE_DIR = Path(__file__).resolve().parent / "nvml_double"
SONAME = "libnvidia-ml.so.1"
MAX_GPUS = 64  # DBL_MAX_GPUS in nvml_double/double.h

# NVML return codes used by the tests (nvmlReturn_t in nvml.h).
NOT_SUPPORTED = 3
NO_PERMISSION = 4
DRIVER_NOT_LOADED = 9
GPU_IS_LOST = 15
UNKNOWN = 999

ControlValue = str | int | float


def nvml_header() -> Path:
    """``nvml.h`` from the installed ``nvidia-nvml-dev`` distribution (wherever its version puts it)."""
    try:
        dist = importlib.metadata.distribution("nvidia-nvml-dev")
    except importlib.metadata.PackageNotFoundError:
        raise RuntimeError("nvidia-nvml-dev is not installed: install the test extra (.[test])") from None
    for f in dist.files or ():
        if f.name == "nvml.h" and f.parent.name == "include":
            return Path(str(dist.locate_file(f)))
    raise RuntimeError("nvidia-nvml-dev is installed but holds no include/nvml.h")


def build(out_dir: Path) -> Path:
    """Compile the double into ``out_dir/libnvidia-ml.so.1`` and return that path."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("no C compiler (cc) found; install build-essential")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / SONAME
    sources = sorted(str(p) for p in SOURCE_DIR.glob("*.c"))
    cmd = [
        compiler, "-shared", "-fPIC", "-O1", "-std=c11", "-Wall", "-Wextra", "-Werror",
        "-I", str(nvml_header().parent), f"-Wl,-soname,{SONAME}", "-o", str(target), *sources, "-lpthread",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"building the NVML double failed:\n{' '.join(cmd)}\n{done.stderr}")
    return target


class NvmlDouble:
    """One test's control and trace files for a built double."""

    def __init__(self, lib_dir: Path, work_dir: Path, trace: bool = True) -> None:
        self.lib_dir = lib_dir
        self.trace = trace  # False: no trace file (benchmarks), the counters only
        self.control_path = work_dir / "nvml-control.txt"
        self.trace_path = work_dir / "nvml-trace.txt"
        self.counters_path = work_dir / "nvml-counters.bin"
        self.values: dict[str, ControlValue] = {}
        self._mtime_ns = 0
        self.write()

    def env(self) -> dict[str, str]:
        env = {
            "LD_LIBRARY_PATH": str(self.lib_dir),
            "NVML_DOUBLE_CONTROL": str(self.control_path),
            "NVML_DOUBLE_COUNTERS": str(self.counters_path),
        }
        if self.trace:
            env["NVML_DOUBLE_TRACE"] = str(self.trace_path)
        return env

    def set(self, values: Mapping[str, ControlValue | None] | None = None, **kw: ControlValue | None) -> None:
        """Change control keys (``None`` removes a key, so it falls back to the double's default)."""
        for key, value in {**(values or {}), **kw}.items():
            if value is None:
                self.values.pop(key, None)
            else:
                self.values[key] = value
        self.write()

    def gpu(self, slot: int, **values: ControlValue | None) -> None:
        """Set keys of GPU ``slot``: ``gpu(1, power_mw=250000)``; dots in keys are written as ``__``."""
        self.set({f"gpu.{slot}.{key.replace('__', '.')}": v for key, v in values.items()})

    def write(self) -> None:
        """Replace the control file atomically with a strictly newer mtime, so the double (which
        compares mtime, size and inode) always notices, however fast the test rewrites it."""
        text = "".join(f"{k}={v}\n" for k, v in self.values.items())
        tmp = self.control_path.with_suffix(".tmp")
        tmp.write_text(text)
        self._mtime_ns = max(time.time_ns(), self._mtime_ns + 1_000_000)
        os.utime(tmp, ns=(self._mtime_ns, self._mtime_ns))
        os.replace(tmp, self.control_path)

    def calls(self) -> Counter[tuple[str, str]]:
        """How often each (function, GPU slot or '-') was called so far."""
        if not self.trace_path.exists():
            return Counter()
        lines = self.trace_path.read_text().splitlines()
        return Counter(tuple(line.split(" ", 1)) for line in lines if " " in line)  # type: ignore[misc]

    def call_totals(self) -> tuple[list[int], int]:
        """Calls answered so far from the counters file: (per GPU slot, without a device)."""
        if not self.counters_path.exists():
            return [0] * MAX_GPUS, 0
        data = self.counters_path.read_bytes()[: (MAX_GPUS + 1) * 8].ljust((MAX_GPUS + 1) * 8, b"\0")
        counts = list(struct.unpack(f"={MAX_GPUS + 1}Q", data))
        return counts[:MAX_GPUS], counts[MAX_GPUS]

    def call_count(self, function: str, slot: int | None = None) -> int:
        where = "-" if slot is None else str(slot)
        return self.calls()[(function, where)]


def gpu_values(slot: int, **overrides: ControlValue) -> dict[str, ControlValue]:
    """A full, distinct set of control values for GPU ``slot`` (different per slot)."""
    base: dict[str, ControlValue] = {
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": f"GPU-{slot:08x}-1111-2222-3333-4444{slot:08x}",
        "pci_bus_id": f"00000000:{0x18 + slot:02X}:00.0",
        "minor": slot + 2,
        "memory.total": 85_520_809_984,
        "memory.used": (10 + slot) * 2**30,
        "memory.reserved": 512 * 2**20,
        "memory.free": 85_520_809_984 - (10 + slot) * 2**30 - 512 * 2**20,
        "util.gpu": 40 + slot,
        "util.memory": 20 + slot,
        "util.encoder": 3 + slot,
        "util.decoder": 5 + slot,
        "temp.gpu": 50 + slot,
        "temp.memory": 60 + slot,
        "power_mw": 250_500 + slot * 1000,
        "power_limit_mw": 700_000,
        "clock.sm": 1_755 - slot,
        "clock.mem": 2_619,
        "clock.sm_max": 1_980,
        "clock.mem_max": 2_619,
        "energy_mj": 123_456_789 + slot,
        "pcie.replay": 7 + slot,
        "pcie.gen": 4,
        "pcie.gen_max": 5,
        "pcie.width": 8,
        "pcie.width_max": 16,
        "pcie.tx_kbps": 1000 + slot,
        "pcie.rx_kbps": 2000 + slot,
        "numa_node": slot % 2,
        "clock_event_reasons": 0x4 | 0x40,
        "ecc.mode": 1,
        "ecc.corrected": 11 + slot,
        "ecc.uncorrected": slot,
        "processes": f"{1000 + slot}:{2**30},{2000 + slot}:{2**31}",
    }
    base.update(overrides)
    return {f"gpu.{slot}.{k}": v for k, v in base.items()}


def exporter_args(work_dir: Path, interval: float = 0.2, **nvml: float) -> list[str]:
    """``--config`` arguments for a fast exporter: short interval, deadline and backoff."""
    settings = {
        "call_timeout_seconds": 0.5,
        "slow_interval_seconds": 1,
        "init_timeout_seconds": 5,
        "reinit_backoff_initial_seconds": 0.1,
        "reinit_backoff_max_seconds": 0.4,
        **nvml,
    }
    path = work_dir / "exporter.yaml"
    path.write_text(f"interval: {interval}\nnvml:\n" + "".join(f"  {k}: {v}\n" for k, v in settings.items()))
    return ["--config", str(path)]


Sample = tuple[str, dict[str, str], float]


def scrape(url: str) -> list[Sample]:
    """Every sample of ``url``/metrics, parsed by prometheus-client's own parser."""
    status, _, body = http_get(url + "/metrics", timeout=5)
    assert status == 200, f"/metrics answered {status}"
    text = body.decode()
    out: list[Sample] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            name = s.name
            # The parser names every counter sample <family>_total; dcgm-exporter's counters have no
            # such suffix, so keep the name the exposition really used.
            if family.type == "counter" and name == family.name + "_total" and f"\n{name}" not in text:
                name = family.name
            out.append((name, dict(s.labels), s.value))
    return out


def scrape_until(
    url: str, predicate: Callable[[list[Sample]], bool], what: str, timeout: float = 10
) -> list[Sample]:
    """Scrape until ``predicate`` holds for the samples; return them (fail after ``timeout``)."""

    def attempt() -> list[Sample] | None:
        samples = scrape(url)
        return samples if predicate(samples) else None

    return wait_for(attempt, timeout, what=what)  # type: ignore[no-any-return]


def value(samples: list[Sample], name: str, **labels: str) -> float | None:
    """The value of the one sample ``name`` whose labels include ``labels`` (None if absent)."""
    found = [v for n, lbl, v in samples if n == name and all(lbl.get(k) == x for k, x in labels.items())]
    assert len(found) <= 1, f"{len(found)} samples of {name} match {labels}"
    return found[0] if found else None


def families_of(samples: list[Sample], uuid: str) -> set[str]:
    """Names of the families that have a sample for the GPU with ``uuid``."""
    return {n for n, lbl, _ in samples if lbl.get("UUID") == uuid}


def api_gpus(url: str) -> dict[str, dict[str, Any]]:
    """/api/v1/gpus by UUID, plus the nvml collector under the key "collector"."""
    status, _, body = http_get(url + "/api/v1/gpus", timeout=5)
    assert status == 200
    doc = json.loads(body)
    out = {g["uuid"]: g for g in doc["gpus"]}
    out["collector"] = next(c for c in doc["collectors"] if c["name"] == "nvml")
    return out


@pytest.fixture(scope="session")
def nvml_double_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding the freshly built double (once per test session)."""
    return build(tmp_path_factory.mktemp("nvml-double")).parent


@pytest.fixture
def nvml_double(nvml_double_lib: Path, tmp_path: Path) -> Iterator[NvmlDouble]:
    yield NvmlDouble(nvml_double_lib, tmp_path)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUTDIR")
    print(build(Path(sys.argv[1])))
