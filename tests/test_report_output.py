"""``rightsizer report --output PATH`` replaces only a regular file or creates a new one, whole; it
refuses a device, a FIFO, a directory or a symbolic link with one line (exit 2) and leaves it as it
was; ``-`` is standard output. The command runs as a user runs it, against a real (empty) Prometheus.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from servers import exporter, prom_query, prometheus, wait_for

GPUS = 3  # the golden scenario's


@pytest.fixture(scope="module")
def prom() -> Iterator[str]:
    """A real Prometheus that has scraped the simulated exporter a few times."""
    with exporter(["--simulate", "golden"]) as e, prometheus({"rightsizer": [e.url.split("//")[1]]}) as p:
        wait_for(lambda: len(prom_query(p.url, "DCGM_FI_DEV_FB_USED")) == GPUS, 60, what="scraped GPUs")
        yield p.url


def report(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rightsizing.command.cli", "report", "--prometheus-url", url]
    cmd += ["--window", "5m", "--format", "json", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def refused(out: subprocess.CompletedProcess[str], path: Path, kind: str) -> None:
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr, out
    assert out.stderr.splitlines() == [
        f"rightsizer: --output {path}: {kind}, not a regular file: not replaced "
        + ("(name the file it points to)" if kind == "a symbolic link" else "(use - for standard output)")
    ]


def fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "pipe")
    return tmp / "pipe"


def device(tmp: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    os.mknod(tmp / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))  # what /dev/null is
    return tmp / "null"


def directory(tmp: Path) -> Path:
    (tmp / "dir").mkdir()
    return tmp / "dir"


def link(tmp: Path) -> Path:
    (tmp / "kept.txt").write_text("not to be touched\n")
    (tmp / "link").symlink_to(tmp / "kept.txt")
    return tmp / "link"


KINDS: dict[str, tuple[Callable[[Path], Path], str, Callable[[int], bool]]] = {
    "fifo": (fifo, "a FIFO", stat.S_ISFIFO),
    "device": (device, "a character device", stat.S_ISCHR),
    "directory": (directory, "a directory", stat.S_ISDIR),
    "symlink": (link, "a symbolic link", stat.S_ISLNK),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_anything_but_a_regular_file_is_refused_and_left_as_it_was(
    prom: str, tmp_path: Path, kind: str
) -> None:
    make, name, still = KINDS[kind]
    path = make(tmp_path)
    refused(report(prom, "--output", str(path)), path, name)
    assert still(os.lstat(path).st_mode)
    if kind == "symlink":
        assert (tmp_path / "kept.txt").read_text() == "not to be touched\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no file left behind


def test_the_refusal_comes_before_any_query() -> None:
    out = report("http://127.0.0.1:1", "--output", "/dev/null")  # no Prometheus there
    refused(out, Path("/dev/null"), "a character device")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_regular_file_is_replaced_keeping_its_mode_a_new_one_is_created_and_dash_is_stdout(
    prom: str, tmp_path: Path
) -> None:
    old = tmp_path / "report.json"
    old.write_text("an older report\n")
    old.chmod(0o640)
    assert report(prom, "--output", str(old)).returncode == 0
    assert json.loads(old.read_text())["totals"]["gpus"] == GPUS and stat.S_IMODE(old.stat().st_mode) == 0o640
    new = tmp_path / "new.json"
    assert report(prom, "--output", str(new)).returncode == 0
    umask = os.umask(0)
    os.umask(umask)
    assert json.loads(new.read_text())["totals"]["gpus"] == GPUS
    assert stat.S_IMODE(new.stat().st_mode) == 0o666 & ~umask
    out = report(prom, "--output", "-")
    assert out.returncode == 0 and json.loads(out.stdout)["totals"]["gpus"] == GPUS
    assert not (Path.cwd() / "-").exists()
