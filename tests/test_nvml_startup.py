"""Starting on NVML where it cannot work: no library at all, nvmlInit failing, nvmlInit hanging.
Each is one clear line and exit code 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from nvmldouble import DRIVER_NOT_LOADED, NvmlDouble, exporter_args
from servers import ROOT


def run_exporter(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", "--listen", "127.0.0.1:0", *args],
        env={**os.environ, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def the_message(done: subprocess.CompletedProcess[str]) -> str:
    """The exporter's own error line; there must be exactly one, and no traceback."""
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    lines = [line for line in done.stderr.splitlines() if line.startswith("rightsizer-exporter: ")]
    assert len(lines) == 1, output
    return lines[0]


def test_no_nvml_library_is_one_line_and_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "no-driver"
    empty.mkdir()
    done = run_exporter(exporter_args(tmp_path), {"LD_LIBRARY_PATH": str(empty)})
    assert done.returncode == 2, done.stderr
    line = the_message(done)
    assert "libnvidia-ml.so.1 not found" in line
    assert "--simulate" in line


def test_nvml_init_failing_is_one_line_and_exit_2(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    nvml_double.set({"error.nvmlInitWithFlags": DRIVER_NOT_LOADED})
    done = run_exporter(exporter_args(tmp_path), nvml_double.env())
    assert done.returncode == 2, done.stderr
    line = the_message(done)
    assert "NVML initialisation failed: Driver Not Loaded (NVML error 9)" in line
    assert "--simulate" in line
    assert nvml_double.call_count("nvmlInitWithFlags") == 1


def test_nvml_init_hanging_is_one_line_and_exit_2(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    nvml_double.set({"hang.nvmlInitWithFlags": 1})
    done = run_exporter(exporter_args(tmp_path, init_timeout_seconds=0.5), nvml_double.env())
    assert done.returncode == 2, done.stderr
    line = the_message(done)
    assert "NVML initialisation hung: nvmlInitWithFlags did not return within 0.5 s" in line
    assert "--simulate" in line


def test_enumeration_failing_at_start_is_one_line_and_exit_2(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    nvml_double.set({"error.nvmlDeviceGetCount_v2": DRIVER_NOT_LOADED})
    done = run_exporter(exporter_args(tmp_path), nvml_double.env())
    assert done.returncode == 2, done.stderr
    assert "NVML initialisation failed: Driver Not Loaded" in the_message(done)
