"""When the control-plane tests run, skip or fail (tests/control_plane.py ``binaries``): they skip
only when scripts/kube-control-plane could not build the binaries, naming why, and fail when it
was simply not run; never pass silently."""

from __future__ import annotations

from pathlib import Path

import control_plane
import pytest


def test_skips_with_the_build_error_when_it_could_not_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control_plane, "TOOLS", tmp_path)
    monkeypatch.setattr(control_plane, "BUILD_FAILED", tmp_path / "kube-control-plane.failed")
    (tmp_path / "kube-control-plane.failed").write_text("E: Unable to find a source package for kubernetes\n")
    with pytest.raises(
        pytest.skip.Exception, match="could not be built here: E: Unable to find a source package"
    ):
        control_plane.binaries()


def test_fails_when_the_script_was_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(control_plane, "TOOLS", tmp_path)
    monkeypatch.setattr(control_plane, "BUILD_FAILED", tmp_path / "kube-control-plane.failed")
    (tmp_path / "etcd").write_text("")
    with pytest.raises(
        pytest.fail.Exception, match=r"kube-apiserver, kube-controller-manager not in \.tools/bin"
    ):
        control_plane.binaries()


def test_finds_the_three(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(control_plane, "TOOLS", tmp_path)
    for name in control_plane.BINARIES:
        (tmp_path / name).write_text("")
    assert control_plane.binaries() == {n: str(tmp_path / n) for n in control_plane.BINARIES}
