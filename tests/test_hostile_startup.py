"""SIGTERM and SIGINT during the exporter's start-up: it stops at once with exit code 0.

Each test holds start-up in one of its long waits (NVML initialisation that hangs with a 300 s
deadline, a kubelet that takes the List call and never answers it, with a 59 s deadline, the
replay of the largest history a scenario may have), sends the signal once the exporter is known to
be in that wait, and then gives it a bounded time to exit: far shorter than the wait, so exiting
in it proves the wait was interrupted (no wall-clock figure is asserted).
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hostile_runs import RSS_LIMIT, Outcome, finish, start
from nvmldouble import NvmlDouble
from pods_fake_kubelet import FakeKubelet, short_socket_dir, write_answer
from servers import wait_for

BOUNDED_WAIT = 20  # seconds given to exit; each wait below would last 59 s or more


def stopped_during_startup(outcome: Outcome) -> None:
    assert outcome.returncode == 0, (outcome.returncode, outcome.stderr[-3000:])
    text = outcome.stdout + outcome.stderr
    assert "Traceback" not in text, text
    assert 'msg="stopped during start-up"' in text, text
    assert "msg=listening" not in text, text  # it stopped before serving, not after
    assert outcome.max_rss_bytes < RSS_LIMIT["exporter"]


def config(tmp: Path, data: dict[str, object]) -> str:
    path = tmp / "exporter.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_while_nvml_init_hangs(nvml_double: NvmlDouble, tmp_path: Path, sig: signal.Signals) -> None:
    nvml_double.set({"hang.nvmlInitWithFlags": 1})
    args = ["--config", config(tmp_path, {"nvml": {"init_timeout_seconds": 300}}), "--listen", "127.0.0.1:0"]
    proc = start("exporter", args, tmp_path, nvml_double.env())
    try:
        wait_for(lambda: nvml_double.call_count("nvmlInitWithFlags") >= 1, 60, what="nvmlInitWithFlags")
        proc.send_signal(sig)
    finally:
        outcome = finish(proc, "exporter", tmp_path, BOUNDED_WAIT)
    stopped_during_startup(outcome)


def test_sigterm_during_history_replay(tmp_path: Path) -> None:
    """The largest scenario allowed (64 GPUs, 4 h of history): SIGTERM once the replay has begun."""
    scenario = tmp_path / "scenario.yaml"
    gpu = {"model": "A100-SXM-80GB", "count": 64, "workload": {"kind": "training"}}
    scenario.write_text(yaml.safe_dump({"history_seconds": 4 * 3600, "gpus": [gpu]}))
    proc = start("exporter", ["--simulate", str(scenario), "--listen", "127.0.0.1:0"], tmp_path)
    err = tmp_path / "exporter.err"
    try:
        wait_for(lambda: "filling windows from history" in err.read_text(), 60, 0.01, what="the replay")
        proc.send_signal(signal.SIGTERM)
    finally:
        outcome = finish(proc, "exporter", tmp_path, BOUNDED_WAIT)
    stopped_during_startup(outcome)
    assert "windows filled from history" not in outcome.stderr


@pytest.fixture
def hung_kubelet() -> Iterator[tuple[Path, FakeKubelet]]:
    """The fake kubelet (real pod-resources gRPC) in ``hang`` mode: it takes List calls and never
    answers them. It runs on an event loop of its own thread, so the test can see its calls."""
    directory = short_socket_dir()
    path, answer = directory / "kubelet.sock", directory / "answer.json"
    write_answer(answer, [], mode="hang")
    kubelet = FakeKubelet(path, answer)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(kubelet.start(), loop).result(30)
    try:
        yield path, kubelet
    finally:
        asyncio.run_coroutine_threadsafe(kubelet.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()
        shutil.rmtree(directory)


def test_sigterm_while_the_kubelet_does_not_answer(
    tmp_path: Path, hung_kubelet: tuple[Path, FakeKubelet]
) -> None:
    path, kubelet = hung_kubelet
    pods = {"enabled": True, "socket": str(path), "timeout_seconds": 59, "refresh_interval_seconds": 120}
    args = ["--config", config(tmp_path, {"pods": pods}), "--simulate", "golden", "--listen", "127.0.0.1:0"]
    proc = start("exporter", args, tmp_path)
    err = tmp_path / "exporter.err"
    try:
        listed = lambda: kubelet.lister.calls >= 1 or proc.poll() is not None  # noqa: E731
        wait_for(listed, 60, 0.01, what="the exporter's List call")
        assert kubelet.lister.calls >= 1, "the exporter exited before it called List"
        proc.send_signal(signal.SIGTERM)
    except AssertionError as exc:  # say what the exporter logged meanwhile
        raise AssertionError(f"{exc}\nexporter's log:\n{err.read_text()[-3000:]}") from None
    finally:
        outcome = finish(proc, "exporter", tmp_path, BOUNDED_WAIT)
    stopped_during_startup(outcome)
