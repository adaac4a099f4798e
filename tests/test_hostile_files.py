"""Hostile files given to the real programs: configuration, scenarios, catalogs, tokens, certificates.

A FIFO, a device, a directory, a 10 MB file, binary content, nesting 10,000 deep, an alias bomb
under a known key, absurd numbers: each is one line on stderr naming the file, exit code 2, no
traceback, and a peak RSS under the manifest's memory limit. Every program is run as a subprocess
(``python -m exporter`` / ``adapter`` / ``rightsizing.command.cli``) as a user would run it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from adapter_support import adapter, get
from hostile_runs import RSS_LIMIT, Outcome, run_program
from servers import ROOT, wait_for

# Nine levels of nine aliases each: 9^9 (387 million) values once expanded, in 300 bytes.
BOMB_SEQUENCE = "[&a [lol,lol,lol,lol,lol,lol,lol,lol,lol], " + ", ".join(
    f"&{n} [" + ",".join([f"*{p}"] * 9) + "]" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
) + "]"
BOMB_MAPPING = "{a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol], " + ", ".join(
    f"{n}: &{n} [" + ",".join([f"*{p}"] * 9) + "]" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
) + "}"
DEEP = "[" * 10_000 + "]" * 10_000
SIMULATE = ["--simulate", "golden", "--listen", "127.0.0.1:0"]
ADAPTER = ["--insecure-http", "--listen", "127.0.0.1:0", "--exporter", "http://127.0.0.1:1/metrics"]


def fifo(tmp: Path) -> Path:
    path = tmp / "config.yaml"
    os.mkfifo(path)  # nobody ever writes it: opening it for reading would wait forever
    return path


def write(tmp: Path, content: str | bytes, name: str = "config.yaml") -> Path:
    path = tmp / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def ten_megabytes(tmp: Path) -> Path:
    # Valid YAML that the exporter would accept if it read it all: a 10 MB host name.
    return write(tmp, "hostname: " + "x" * 10_000_000 + "\n")


def refused(outcome: Outcome, program: str, *words: str) -> str:
    """Exit 2, one line naming what is wrong, no traceback, memory under the manifest limit."""
    assert outcome.returncode == 2, (outcome.returncode, outcome.stderr[-2000:])
    line = outcome.one_line(program)
    for word in words:
        assert word in line, line
    assert outcome.max_rss_bytes < RSS_LIMIT.get(program, RSS_LIMIT["exporter"]), outcome.max_rss_bytes
    return line


# -- the exporter's --config ----------------------------------------------------------------------

EXPORTER_FILES: dict[str, tuple[Callable[[Path], Path], tuple[str, ...]]] = {
    "fifo": (fifo, ("not a regular file (a FIFO)",)),
    "directory": (lambda t: (t / "conf.d").mkdir() or t / "conf.d", ("is a directory",)),
    "dev-zero": (lambda t: Path("/dev/zero"), ("/dev/zero", "not a regular file (a character device)")),
    "10 MB": (ten_megabytes, ("larger than the 256 KiB limit (9.5 MiB)",)),
    "binary": (lambda t: write(t, bytes(range(256)) * 40), ("not UTF-8 text (byte 0x80 at offset 128)",)),
    "nested 10,000 deep": (lambda t: write(t, f"interval: {DEEP}\n"), ("nested more than 64 levels deep",)),
    "mapping nested 10,000 deep": (
        lambda t: write(t, "pods: " + "{a: " * 10_000 + "1" + "}" * 10_000 + "\n"),
        ("nested more than 64 levels deep",),
    ),
    "bomb under interval": (lambda t: write(t, f"interval: {BOMB_SEQUENCE}\n"), ("more than 100000 values",)),
    "bomb under listen": (lambda t: write(t, f"listen: {BOMB_SEQUENCE}\n"), ("more than 100000 values",)),
    "bomb under catalog.prices": (
        lambda t: write(t, f"catalog:\n  prices: {BOMB_MAPPING}\n"),
        ("more than 100000 values",),
    ),
    "bomb under queues[].labels": (
        lambda t: write(
            t, f"queues:\n  - {{name: q, kind: http_json, url: 'http://127.0.0.1:1/', path: n, "
            f"labels: {BOMB_MAPPING}}}\n",
        ),
        ("more than 100000 values",),
    ),
    "just under 256 KiB of tiny values": (
        lambda t: write(t, "interval: [" + ",".join(["1"] * 125_000) + "]\n"),
        ("more than 100000 values",),
    ),
    "alias inside its own value": (lambda t: write(t, "interval: &x [*x]\n"), ("alias *x is inside",)),
    "an integer of 5000 digits": (lambda t: write(t, "interval: " + "9" * 5000 + "\n"), ("4300 digits",)),
    "extra_gpus_file is a FIFO": (
        lambda t: write(t, f"catalog: {{extra_gpus_file: {fifo(t)}}}\n", "exporter.yaml"),
        ("config.yaml: cannot read: not a regular file (a FIFO)",),
    ),
    "extra_gpus_file is an alias bomb": (
        lambda t: write(
            t, f"catalog: {{extra_gpus_file: {write(t, f'gpus: {BOMB_SEQUENCE}', 'gpus.yaml')}}}\n",
            "exporter.yaml",
        ),
        ("gpus.yaml", "more than 100000 values"),
    ),
    "queue bearer_token_file is a FIFO": (
        lambda t: write(
            t, f"queues:\n  - {{name: q, kind: http_json, url: 'http://127.0.0.1:1/', path: n, "
            f"bearer_token_file: {fifo(t)}}}\n", "exporter.yaml",
        ),
        ("bearer_token_file", "not a regular file (a FIFO)"),
    ),
    "queue tls_ca_file is /dev/zero": (
        lambda t: write(
            t, "queues:\n  - {name: q, kind: http_json, url: 'https://127.0.0.1:1/', path: n, "
            "tls_ca_file: /dev/zero}\n",
        ),
        ("tls_ca_file", "not a regular file (a character device)"),
    ),
}


@pytest.mark.parametrize("case", list(EXPORTER_FILES))
def test_exporter_config_file_refused_in_one_line(tmp_path: Path, case: str) -> None:
    make, words = EXPORTER_FILES[case]
    path = make(tmp_path)
    outcome = run_program("exporter", ["--config", str(path), *SIMULATE], tmp_path)
    refused(outcome, "exporter", str(path), *words)


# -- scenario files (--simulate PATH) -------------------------------------------------------------

GPU = {"model": "A100-SXM-80GB", "workload": {"kind": "steady_inference"}}
MIG = {"profile": "1g.10gb", "workload": {"kind": "idle"}}


def scenario(tmp: Path, gpus: list[dict[str, object]], **top: object) -> Path:
    return write(tmp, yaml.safe_dump({**top, "gpus": gpus}))


SCENARIOS: dict[str, tuple[Callable[[Path], Path], tuple[str, ...]]] = {
    "fifo": (fifo, ("not a regular file (a FIFO)",)),
    "10 MB": (lambda t: write(t, "description: " + "x" * 10_000_000 + "\n"), ("larger than the",)),
    "binary": (lambda t: write(t, b"seed: 1\n\xff\xfe\x00gpus"), ("not UTF-8 text",)),
    "nested 10,000 deep": (lambda t: write(t, f"gpus: {DEEP}\n"), ("nested more than 64 levels deep",)),
    "bomb under seed": (
        lambda t: write(t, f"seed: {BOMB_SEQUENCE}\ngpus: [{{model: L4, workload: {{kind: idle}}}}]\n"),
        ("more than 100000 values",),
    ),
    "infinite seed": (
        lambda t: write(t, "seed: .inf\ngpus: [{model: L4, workload: {kind: idle}}]\n"),
        ("seed: must be an integer; got inf",),
    ),
    "8 x 1024 GPUs with 30 days of history": (
        lambda t: scenario(t, [{**GPU, "count": 1024}] * 8, history_seconds=30 * 86400),
        ("count: must be at most 64; got 1024",),
    ),
    "65 devices": (
        lambda t: scenario(t, [{**GPU, "count": 64}, {**GPU, "count": 1}]),
        ("would simulate 65 GPUs and MIG instances; at most 64",),
    ),
    "16 GPUs split in seven": (
        lambda t: scenario(t, [{"model": "A100-SXM-80GB", "count": 16, "mig": [MIG] * 7}]),
        ("would simulate 128 GPUs and MIG instances",),
    ),
    "64 GPUs at speed 100000": (
        lambda t: scenario(t, [{**GPU, "count": 64}], speed=100000),
        ("speed 100000 x 64 GPUs and MIG instances x interval 1 s is 6400000 simulated device-seconds",),
    ),
    "8 GPUs with 30 days of history": (
        lambda t: scenario(t, [{**GPU, "count": 8}], history_seconds=30 * 86400),
        ("5760 device-hours of history to replay; at most 256",),
    ),
}


@pytest.mark.parametrize("case", list(SCENARIOS))
def test_scenario_file_refused_in_one_line(tmp_path: Path, case: str) -> None:
    make, words = SCENARIOS[case]
    path = make(tmp_path)
    outcome = run_program("exporter", ["--simulate", str(path), "--check-config"], tmp_path)
    refused(outcome, "exporter", str(path), *words)


def test_largest_scenario_allowed_passes_check_config(tmp_path: Path) -> None:
    """The limits leave room: 64 devices with 4 hours of history (256 device-hours) is accepted."""
    path = scenario(tmp_path, [{**GPU, "count": 64}], history_seconds=4 * 3600)
    outcome = run_program("exporter", ["--simulate", str(path), "--check-config"], tmp_path)
    assert outcome.returncode == 0, outcome.stderr
    assert outcome.stdout.strip() == "configuration: OK"


def test_anchors_and_aliases_within_bounds_still_work(tmp_path: Path) -> None:
    """Aliases are bounded, not refused: a configuration repeating a mapping through one loads."""
    path = write(tmp_path, "nvml: &n {call_timeout_seconds: 1.5}\ncatalog:\n  prices: &p {L4-24GB: 0.5}\n")
    outcome = run_program("exporter", ["--config", str(path), "--check-config"], tmp_path)
    assert outcome.returncode == 0, outcome.stderr


# -- the adapter ----------------------------------------------------------------------------------

ADAPTER_FILES: dict[str, tuple[Callable[[Path], list[str]], tuple[str, ...]]] = {
    "config is a FIFO": (lambda t: ["--config", str(fifo(t))], ("not a regular file (a FIFO)",)),
    "config is /dev/zero": (lambda t: ["--config", "/dev/zero"], ("not a regular file",)),
    "config is 10 MB": (lambda t: ["--config", str(ten_megabytes(t))], ("larger than the 256 KiB limit",)),
    "config is binary": (lambda t: ["--config", str(write(t, b"\x80" * 4096))], ("not UTF-8 text",)),
    "config nested 10,000 deep": (
        lambda t: ["--config", str(write(t, f"rules: {DEEP}\n"))], ("nested more than 64 levels deep",)
    ),
    "bomb under listen": (
        lambda t: ["--config", str(write(t, f"listen: {BOMB_SEQUENCE}\n"))], ("more than 100000 values",)
    ),
    "serving certificate is a FIFO": (
        lambda t: ["--tls-cert-file", str(fifo(t)), "--tls-private-key-file", "/dev/zero"],
        ("cannot load the serving certificate", "not a regular file (a FIFO)"),
    ),
    "Prometheus CA is a FIFO": (
        lambda t: ["--prometheus-ca-file", str(fifo(t))],
        ("cannot load Prometheus TLS files", "not a regular file (a FIFO)"),
    ),
}


@pytest.mark.parametrize("case", list(ADAPTER_FILES))
def test_adapter_file_refused_in_one_line(tmp_path: Path, case: str) -> None:
    make, words = ADAPTER_FILES[case]
    args = make(tmp_path)
    if "--tls-cert-file" in args:
        base = ["--listen", "127.0.0.1:0", "--exporter", "http://127.0.0.1:1/metrics"]
    elif "--prometheus-ca-file" in args:
        base = ["--insecure-http", "--listen", "127.0.0.1:0", "--prometheus-url", "https://127.0.0.1:1"]
    else:
        base = ADAPTER
    refused(run_program("adapter", [*args, *base], tmp_path), "adapter", *words)


# -- the rightsizer command -----------------------------------------------------------------------


def test_report_bearer_token_file_fifo_is_one_line(tmp_path: Path) -> None:
    token = fifo(tmp_path)
    outcome = run_program(
        "rightsizing.command.cli",
        ["report", "--prometheus-url", "http://127.0.0.1:1", "--bearer-token-file", str(token)],
        tmp_path,
    )
    assert outcome.returncode == 2, outcome.stderr
    line = outcome.stderr.strip()
    assert "Traceback" not in outcome.stderr and "\n" not in line, outcome.stderr
    assert line == f"rightsizer: --bearer-token-file {token}: not a regular file (a FIFO)"


def test_plan_config_json_nested_deep_is_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, "[" * 100_000 + "]" * 100_000, "config.json")
    outcome = run_program("rightsizing.command.cli", ["plan", "--config", str(path)], tmp_path)
    assert outcome.returncode == 2, outcome.stderr
    assert "Traceback" not in outcome.stderr, outcome.stderr
    assert outcome.stderr.strip() == f"rightsizer: --config {path}: not valid JSON: nested too deep"


def test_adapter_keeps_serving_when_its_prometheus_token_file_is_a_fifo(tmp_path: Path) -> None:
    """The token is read again before every refresh (rotation): a FIFO put there while it runs is
    one logged error, not an event loop stuck in open() for good. (At start, the start refuses it.)"""
    token = write(tmp_path, "a-token\n", "token")
    args = ["--insecure-http", "--prometheus-url", "http://127.0.0.1:1", "--prometheus-bearer-token-file",
            str(token), "--refresh-interval", "0.5"]  # fmt: skip
    with adapter(args, ready=False) as p:
        token.unlink()
        os.mkfifo(token)  # nobody ever writes it
        wait_for(lambda: "not a regular file (a FIFO)" in p.log(), 30, what="the token file's error")
        assert get(p.url + "/healthz", timeout=5)[0] == 200
        assert "Traceback" not in p.log()


def test_configuration_behind_symbolic_links_is_read(tmp_path: Path) -> None:
    """Kubernetes mounts a ConfigMap as links (config.yaml -> ..data/config.yaml -> ..2026_x/...):
    regular files only means the file linked to, not the link."""
    data = tmp_path / "..2026_01_01" / "config.yaml"
    data.parent.mkdir()
    data.write_text("interval: 2\n")
    (tmp_path / "..data").symlink_to(data.parent.name)
    (tmp_path / "config.yaml").symlink_to("..data/config.yaml")
    outcome = run_program("exporter", ["--config", str(tmp_path / "config.yaml"), "--check-config"], tmp_path)
    assert outcome.returncode == 0, outcome.stderr


# -- files read again while running ---------------------------------------------------------------
# Each reader runs in a child process with a deadline, given a FIFO that nobody writes: a reader
# that opened it would wait forever (stalling the event loop, or a worker thread that the process
# then waits for at exit). Each must answer with its own error at once.

READERS = {
    "queue token (SecretFile)": (
        "from exporter.sources.queues.base import SecretFile\nSecretFile(PATH, 'bearer_token_file').value()",
        "QueueSourceError: cannot read bearer_token_file {path}: not a regular file (a FIFO)",
    ),
    "Prometheus token (adapter)": (
        "from adapter.sources.prometheus import _read_secret\n_read_secret(PATH, 'bearer token file')",
        "QueryError: cannot read bearer token file {path}: not a regular file (a FIFO)",
    ),
    "Kubernetes token (adapter pod lister)": (
        "from adapter.config import KubernetesSettings\nfrom adapter.kubernetes.pods import PodLister\n"
        "assert PodLister(KubernetesSettings(token_file=PATH))._token() is None\nprint('no token')",
        "no token",
    ),
    "kubelet checkpoint": (
        "from exporter.sources.pods.checkpoint import read_checkpoint\nread_checkpoint(PATH)",
        "CheckpointError: cannot read {path}: not a regular file (a FIFO)",
    ),
    "/proc/<pid>/cgroup": (
        "import os\nfrom exporter.sources.pods.cgroup import read_cgroup\n"
        "os.makedirs(PATH + '.proc/7')\nos.mkfifo(PATH + '.proc/7/cgroup')\nread_cgroup(PATH + '.proc', 7)",
        "not a regular file (a FIFO)",
    ),
    "/proc/stat": (
        "import os\nfrom rightsizing.hostcpu import read_cpu_times\n"
        "os.makedirs(PATH + '.proc')\nos.mkfifo(PATH + '.proc/stat')\nread_cpu_times(PATH + '.proc')",
        "ProcStatError: cannot read {path}.proc/stat: not a regular file (a FIFO)",
    ),
}


@pytest.mark.parametrize("case", list(READERS))
def test_reader_answers_at_once_for_a_fifo(tmp_path: Path, case: str) -> None:
    code, expected = READERS[case]
    path = fifo(tmp_path)
    script = f"PATH = {str(path)!r}\n{code}\n"
    try:
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case}: the reader was still waiting on the FIFO after 30 s")
    assert expected.format(path=path) in done.stdout + done.stderr, done.stdout + done.stderr
