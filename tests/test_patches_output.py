"""``--format patches --output DIR`` writes a folder and nothing else: a link, a file, a FIFO or a
device named as DIR is refused before anything is written; files in it that the command did not
write are neither replaced nor removed; patches it wrote before and no longer lists are removed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from patches_units import held, patch_set

from rightsizing.command.output_file import OutputError
from rightsizing.command.report_patches import write_patches

ONE = [held("chat-7b9c4-x2k9q", "H100-SXM-80GB", "L4-24GB")]
TWO = [*ONE, held("ranker-0", "A100-SXM-80GB", "A100-SXM-80GB/1g.20gb", namespace="search")]


def test_a_new_folder_holds_the_files_and_a_rerun_replaces_its_own(tmp_path: Path) -> None:
    out = tmp_path / "patches"
    write_patches(patch_set(TWO), str(out))
    assert sorted(os.listdir(out)) == ["README.md", "kustomization.yaml", "llm_deployment_chat.yaml",
                                       "search_statefulset_ranker.yaml"]  # fmt: skip
    (out / "notes.yaml").write_text("mine: true\n")  # a reviewer's own file
    write_patches(patch_set(ONE), str(out))
    # The ranker's patch, written by the first run and not listed by the second, is gone.
    kept = ["README.md", "kustomization.yaml", "llm_deployment_chat.yaml", "notes.yaml"]
    assert sorted(os.listdir(out)) == kept
    assert (out / "notes.yaml").read_text() == "mine: true\n"
    assert (out / "kustomization.yaml").read_text() == patch_set(ONE).files["kustomization.yaml"]


def test_files_it_did_not_write_are_not_replaced(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# our team's notes\n")
    with pytest.raises(OutputError, match=r"README\.md is not a file this command wrote: not replaced"):
        write_patches(patch_set(ONE), str(tmp_path))
    assert (tmp_path / "README.md").read_text() == "# our team's notes\n"
    assert sorted(os.listdir(tmp_path)) == ["README.md"]


def test_a_link_a_file_or_a_fifo_as_the_folder_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    (tmp_path / "file").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    for name, kind in (("link", "a symbolic link"), ("file", "not a folder"), ("fifo", "not a folder")):
        refused = f"--output .*{name}: {kind}: patches are written into a folder"
        with pytest.raises(OutputError, match=refused):
            write_patches(patch_set(ONE), str(tmp_path / name))
    assert os.listdir(target) == [] and (tmp_path / "file").read_text() == "x"
    with pytest.raises(OutputError, match="No such file or directory"):
        write_patches(patch_set(ONE), str(tmp_path / "missing" / "patches"))


def test_a_link_inside_the_folder_is_not_followed(tmp_path: Path) -> None:
    out = tmp_path / "patches"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (out / "kustomization.yaml").symlink_to(victim)
    with pytest.raises(OutputError, match=r"kustomization\.yaml is not a file this command wrote"):
        write_patches(patch_set(ONE), str(out))
    assert victim.read_text() == "keep"


def test_a_bad_output_folder_is_refused_before_any_query(tmp_path: Path) -> None:
    """Prometheus at a port nobody listens on: the answer is about --output, not about Prometheus."""
    (tmp_path / "link").symlink_to(tmp_path)
    cmd = [sys.executable, "-m", "rightsizing.command.cli", "report", "--prometheus-url", "http://127.0.0.1:9",
           "--format", "patches"]  # fmt: skip
    for args, said in (
        ([], "--format patches writes a folder: give it with --output DIR"),
        (["--output", "-"], "--format patches writes a folder: give it with --output DIR"),
        (["--output", str(tmp_path / "link")], f"--output {tmp_path / 'link'}: a symbolic link: patches are "
         "written into a folder of their own"),
    ):  # fmt: skip
        done = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=60)
        assert (done.returncode, done.stdout, done.stderr) == (2, "", f"rightsizer: {said}\n")


LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh", strict=True)
)


def test_unreadable_manifests_are_one_line_before_any_query(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("kind: Deployment\nmetadata: [unclosed\n")
    (tmp_path / "laughs.yaml").write_text(LAUGHS)  # 10^8 values once the aliases are expanded
    os.mkfifo(tmp_path / "fifo.yaml")
    cmd = [sys.executable, "-m", "rightsizing.command.cli", "report", "--prometheus-url", "http://127.0.0.1:9",
           "--format", "patches", "--output", str(tmp_path / "out")]  # fmt: skip
    for name, said in (
        ("broken.yaml", "not valid YAML at line 3"),
        ("laughs.yaml", "more than 100000 values"),
        ("fifo.yaml", "not a regular file (a FIFO)"),
        ("missing.yaml", "No such file or directory"),
    ):
        done = subprocess.run([*cmd, "--manifests", str(tmp_path / name)], capture_output=True, text=True,
                              timeout=60)  # fmt: skip
        assert done.returncode == 2 and done.stdout == "", name
        assert done.stderr.startswith("rightsizer: ") and done.stderr.count("\n") == 1, done.stderr
        assert said in done.stderr and name in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()
