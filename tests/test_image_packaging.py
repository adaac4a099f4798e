"""The image's version label, its build line, the runtime environment and the build requirement.

No container engine runs here, so the Dockerfile is read as text (with ``test_dockerfile``'s
parser) and every command it and the README rely on is run for real where it can be: the README's
``VERSION`` expression, and the uninstall that leaves the runtime environment without pip and
setuptools, in a fresh virtual environment of this Python.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

from servers import ROOT
from test_dockerfile import DOCKERFILE, instructions, stages

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PROJECT["project"]["version"]
VENV = "/opt/rightsizer"


def build_lines(text: str) -> list[str]:
    """Every ``docker build`` command in ``text``, continuation lines (also in comments) joined."""
    lines = [re.sub(r"^\s*#?\s*", "", ln) for ln in text.splitlines()]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    return [ln for ln in joined.splitlines() if ln.startswith("docker build ")]


def build_args(line: str) -> dict[str, str]:
    """``--build-arg NAME=VALUE`` pairs; a ``$(...)`` value up to its matching parenthesis."""
    args = {}
    for m in re.finditer(r"--build-arg (\w+)=", line):
        value, depth = "", 0
        for ch in line[m.end():]:
            if ch == " " and depth == 0:
                break
            depth += {"(": 1, ")": -1}.get(ch, 0)
            value += ch
        args[m.group(1)] = value
    return args


def test_version_default_is_the_package_version_and_the_label_uses_it() -> None:
    text = DOCKERFILE.read_text()
    everything = instructions(text)
    first_from = next(i for i, (k, _) in enumerate(everything) if k == "FROM")
    global_args = dict(a.split("=", 1) for k, a in everything[:first_from] if k == "ARG" and "=" in a)
    assert global_args.get("VERSION") == VERSION, "the VERSION default must be pyproject.toml's version"
    final = stages(text)[-1]
    assert ("ARG", "VERSION") in final and ("ARG", "REVISION") in final  # no default typed again
    labels = " ".join(a for k, a in final if k == "LABEL")
    assert 'org.opencontainers.image.version="${VERSION}"' in labels
    assert 'org.opencontainers.image.revision="${REVISION}"' in labels


def test_build_stage_refuses_a_version_its_package_does_not_have() -> None:
    build = stages(DOCKERFILE.read_text())[0]
    assert ("ARG", "VERSION") in build
    runs = " ".join(a for k, a in build if k == "RUN")
    assert f'test "$({VENV}/bin/rightsizer-exporter --version)" = "rightsizer-exporter ${{VERSION}}"' in runs


def test_documented_and_dockerfile_build_lines_pass_version_and_revision() -> None:
    lines = build_lines((ROOT / "docs" / "deploy.md").read_text()) + build_lines(DOCKERFILE.read_text())
    assert len(lines) >= 2, lines
    for line in lines:
        args = build_args(line)
        assert set(args) >= {"VERSION", "REVISION"}, line
        assert args["REVISION"] == "$(git rev-parse --short HEAD)", line
        expression = re.fullmatch(r"\$\((.*)\)", args["VERSION"])
        assert expression, f"VERSION must be computed, not typed: {line}"
        done = subprocess.run(expression.group(1), shell=True, cwd=ROOT, capture_output=True, text=True,
                              timeout=30)
        assert (done.returncode, done.stdout.strip()) == (0, VERSION), done.stderr


def test_runtime_environment_is_left_without_pip_and_setuptools(tmp_path: Path) -> None:
    """The build stage's uninstall, run on a fresh environment of this Python (3.11's venv carries
    both pip and setuptools): afterwards neither is importable there, and nothing runs pip later."""
    build, final = stages(DOCKERFILE.read_text())[0], stages(DOCKERFILE.read_text())[-1]
    run = " ".join(a for k, a in build if k == "RUN")
    command = f"{VENV}/bin/python -m pip uninstall --yes pip setuptools"
    assert command in run, f"the build stage must run: {command}"
    assert run.index(f"{VENV}/bin/pip install") < run.index(command), "uninstall after the install"
    assert not any("pip" in a for k, a in final if k == "RUN")

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
    python = venv / "bin" / "python"
    present = "import importlib.util as u; print(bool(u.find_spec('pip')), bool(u.find_spec('setuptools')))"
    before = subprocess.run([python, "-c", present], capture_output=True, text=True, timeout=30)
    before_found = before.stdout.split()
    assert before_found[0] == "True"  # the environment had pip, so the check below means something
    uninstall = shlex.split(command.replace(VENV, str(venv)))
    subprocess.run(uninstall, check=True, capture_output=True, timeout=120)
    after = subprocess.run([python, "-c", present], capture_output=True, text=True, timeout=30)
    assert after.stdout.split() == ["False", "False"], after.stderr
    assert not list((venv / "bin").glob("pip*"))


def test_build_requires_a_setuptools_that_reads_spdx_licenses() -> None:
    """``license = "Apache-2.0"`` (an SPDX expression) needs setuptools 77 or later."""
    assert isinstance(PROJECT["project"]["license"], str)
    (requirement,) = [r for r in PROJECT["build-system"]["requires"] if r.startswith("setuptools")]
    floor = re.fullmatch(r"setuptools>=(\d+)(?:\.\d+)*", requirement)
    assert floor and int(floor.group(1)) >= 77, requirement
