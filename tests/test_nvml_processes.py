"""``NvmlSource.running_processes()``, the hook pod attribution reads: compute processes per GPU
UUID as of the last cycle, from NVML (through nvidia-ml-py and the C double, in a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from nvmldouble import NvmlDouble, gpu_values
from servers import ROOT

SCRIPT = """
import asyncio, json
from exporter.config import NvmlSettings
from exporter.sources.nvml.source import NvmlSource

async def main():
    source = NvmlSource(NvmlSettings())
    await source.start()
    await source.collect()
    listed = source.running_processes()
    print(json.dumps({uuid: [[p.pid, p.used_memory_bytes] for p in procs] for uuid, procs in listed.items()}))
    await source.stop()

asyncio.run(main())
"""


def test_running_processes_are_listed_per_gpu_uuid(nvml_double: NvmlDouble) -> None:
    gpus = [gpu_values(i) for i in range(3)]
    uuids = [str(g[f"gpu.{i}.uuid"]) for i, g in enumerate(gpus)]
    nvml_double.set({"gpus": 3, **gpus[0], **gpus[1], **gpus[2]})
    nvml_double.gpu(0, processes=f"4242:{3 * 2**30},4343:{2**20}")
    nvml_double.gpu(1, processes=None)  # no processes
    nvml_double.gpu(2, lost=1)  # NVML cannot be asked: not listed
    done = subprocess.run([sys.executable, "-c", SCRIPT], env={**os.environ, **nvml_double.env()}, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert listed == {uuids[0]: [[4242, 3 * 2**30], [4343, 2**20]], uuids[1]: []}


def test_running_processes_need_no_nvml_call(nvml_double: NvmlDouble) -> None:
    """Called on the event loop every cycle: it must answer from the last cycle, not ask NVML."""
    nvml_double.set({"gpus": 1, **gpu_values(0)})
    script = SCRIPT.replace(
        "    listed = source.running_processes()",
        "    before = open(TRACE).read()\n"
        "    listed = source.running_processes()\n    assert open(TRACE).read() == before",
    )
    script = f"TRACE = {str(nvml_double.trace_path)!r}\n" + script
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, **nvml_double.env()}, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {str(gpu_values(0)["gpu.0.uuid"]): [[1000, 2**30], [2000, 2**31]]}
