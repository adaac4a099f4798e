"""The shell examples of README.md and docs/*.md name programs, flags, files and Kubernetes objects
that exist.

For every command of every ``sh`` block (tests/doc_blocks.py splits them): Rightsizer's programs,
and the other programs installed here (kubectl, helm, docker, curl), must list each long flag the
example gives in their ``--help`` (of the subcommand); a synopsis line (``[--flag VALUE]``) must
also offer each value it lists (``fp32|bf16``); files and folders of the repository it names must
exist, its kustomizations must render, and the objects ``kubectl`` is told to wait for, exec into
or get must be among the manifests of ``deploy/``. Programs not installed here (kind, kustomize)
are checked only for the repository paths they name; helm commands installing the chart are
rendered by tests/test_helm_docs.py. The runnable examples run in tests/test_readme_examples.py.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import kube
import pytest
import yaml
from doc_blocks import Block, all_blocks, commands, kind
from k8s_tools import tool
from servers import ROOT

BIN = Path(sys.executable).parent
OURS = {"rightsizer-exporter", "rightsizer-adapter", "rightsizer"}
SUBCOMMANDS = {"rightsizer": 1, "kubectl": 1, "docker": 1, "helm": 1}  # words of the command before its flags
HELM_GROUPS = {"repo", "show", "get", "plugin", "registry", "dependency", "search"}  # helm repo add, ...
OTHERS = {"kubectl", "helm", "docker", "curl"}  # installed here; their --help is safe to run
SHELL_WORDS = {"until", "while", "do", "done", "if", "then", "fi", "!"}
TOP_FOLDERS = "deploy|dashboards|bench|scripts|docs|tests|exporter|adapter|rightsizer_core|rightsizing"
REPO_PATH = re.compile(rf"^(?:{TOP_FOLDERS})/[\w./*-]*$")
KINDS = {
    "daemonset": "DaemonSet",
    "deployment": "Deployment",
    "deploy": "Deployment",
    "hpa": "HorizontalPodAutoscaler",
    "scaledobject": "ScaledObject",
}
SHELL_BLOCKS = [b for b in all_blocks() if kind(b) == "shell"]


@functools.cache
def help_text(*words: str) -> str:
    assert words[0] in OURS | OTHERS, words[0]
    program = str(BIN / words[0]) if words[0] in OURS else installed(words[0])
    assert program, f"{words[0]} is not installed"
    out = subprocess.run([program, *words[1:], "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout, f"{' '.join(words)} --help failed: {out.stderr}"
    return out.stdout


def installed(name: str) -> str | None:
    """helm and kubectl from scripts/k8s-tools (.tools/bin), anything else from PATH."""
    return tool(name) if name in ("helm", "kubectl") else shutil.which(name)


def program_of(words: list[str]) -> list[str]:
    """The program and subcommand words a command runs (``.venv/bin/`` stripped)."""
    words = [w for w in words if w not in SHELL_WORDS]
    name = words[0].removeprefix(".venv/bin/")
    rest = [w for i, w in enumerate(words[1:]) if not w.startswith("-") and not (i > 0 and words[i] == "-n")]
    depth = 2 if name == "helm" and rest[:1] and rest[0] in HELM_GROUPS else SUBCOMMANDS.get(name, 0)
    return [name, *rest[:depth]]


def long_flags(words: list[str]) -> list[str]:
    before = words[: words.index("--")] if "--" in words else words
    return [w.split("=", 1)[0] for w in before if re.fullmatch(r"--[a-z][\w-]*(=.*)?", w)]


def check_flags(program: list[str], flags: list[str], where: str) -> list[str]:
    if program[0] not in OURS and not (program[0] in OTHERS and installed(program[0])):
        return []  # not installed here (kind, kustomize), or not a program with a --help: paths only
    text = help_text(*program)
    return [
        f"{where}: {' '.join(program)} has no {flag}"
        for flag in flags
        if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text)
    ]


def check_synopsis(line: str, where: str) -> list[str]:
    words = line.split()
    words[0] = words[0].removeprefix(".venv/bin/")
    program = [words[0], *([words[1]] if words[0] in SUBCOMMANDS else [])]
    flags = re.findall(r"(?<![\w-])--[a-z][\w-]*", line)
    problems = check_flags(program, flags, where)
    text = help_text(*program)
    for flag, values in re.findall(r"(--[a-z][\w-]*) ([\w.-]+(?:\|[\w.-]+)+)", line):
        problems += [
            f"{where}: {flag} {v} is not offered"
            for v in values.split("|")
            if not re.search(rf"(?<![\w-]){re.escape(v)}(?![\w-])", text)
        ]
    return problems


@functools.cache
def deploy_objects() -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for kustomization in sorted(ROOT.glob("deploy/**/kustomization.yaml")):
        objects += kube.render(kustomization.parent)
    for path in sorted(ROOT.glob("deploy/examples/*.yaml")):
        objects += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return objects


def base_images() -> set[str]:
    """The images deploy/base runs, as rendered (its kustomization sets them)."""
    return {c["image"] for o in kube.render(ROOT / "deploy/base") if o["kind"] in ("DaemonSet", "Deployment")
            for c in o["spec"]["template"]["spec"]["containers"]}


def has_object(kind_name: str, namespace: str, name: str) -> bool:
    return any(
        o["kind"] == kind_name
        and o["metadata"]["name"] == name
        and o["metadata"].get("namespace", namespace) == namespace
        for o in deploy_objects()
    )


def is_object_ref(word: str) -> bool:
    return word.count("/") == 1 and word.split("/")[0] in KINDS


def check_kubectl(words: list[str], where: str) -> list[str]:
    problems: list[str] = []
    namespace = words[words.index("-n") + 1] if "-n" in words else "default"
    if "-k" in words and REPO_PATH.match(words[words.index("-k") + 1]):  # not a user's own (-k .)
        directory = ROOT / words[words.index("-k") + 1]
        kube.render(directory)  # fails the test with kubectl's message if it does not render
    if "-f" in words and not (ROOT / words[words.index("-f") + 1]).is_file():
        problems.append(f"{where}: no file {words[words.index('-f') + 1]}")
    args = [w for i, w in enumerate(words) if not w.startswith("-") and words[i - 1] != "-n"]
    paths = {words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-k", "-f")}
    refs = [w for w in args if is_object_ref(w) and w not in paths]
    if len(args) >= 3 and args[1] == "get" and args[2] in KINDS and len(args) >= 4:
        refs.append(f"{args[2]}/{args[3]}")
    for ref in refs:
        kind_name, name = ref.split("/", 1)
        if not has_object(KINDS[kind_name], namespace, name):
            problems.append(f"{where}: no {KINDS[kind_name]} {namespace}/{name} in deploy/")
    return problems


def problems_of(block: Block) -> list[str]:
    problems: list[str] = []
    for number, line in enumerate(re.sub(r"\\\n", " ", block.body).splitlines()):
        where = f"{block.where}+{number + 1}"
        if "[--" in line or "(--" in line:
            problems += check_synopsis(line.strip(), where)
            continue
        for words in commands(line):
            program = program_of(words)
            problems += check_flags(program, long_flags(words), where)
            problems += [
                f"{where}: no {w} in the repository"
                for w in words
                if REPO_PATH.match(w) and not is_object_ref(w) and not list(ROOT.glob(w))
            ]
            if program[0] == "kubectl":
                problems += check_kubectl(words, where)
            if program[0] == "scripts/test" and not (ROOT / "scripts/test").stat().st_mode & 0o111:
                problems.append(f"{where}: scripts/test is not executable")
            if program[0] == "docker" and "-t" in words:
                tag = words[words.index("-t") + 1]
                pushed = any(w[:2] == ["docker", "push"] and tag in w for w in commands(block.body))
                if tag not in base_images() and not pushed:
                    problems.append(f"{where}: deploy/base runs no image {tag}")
            extras = re.findall(r"\.\[(\w+)\]", " ".join(words))
            defined = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
            problems += [f"{where}: no extra [{e}] in pyproject.toml" for e in extras if e not in defined]
    return problems


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=lambda b: b.where)
def test_shell_example_names_what_exists(block: Block) -> None:
    assert problems_of(block) == []


def test_wrong_shell_examples_are_caught() -> None:
    wrong = Block(
        "README.md",
        1,
        "sh",
        (
            ".venv/bin/rightsizer-exporter --simulate --intervall 5\n"
            "rightsizer plan --model x [--precision fp32|fp7] [--format table|xml]\n"
            "kubectl apply -k deploy/examples/demo && kubectl -n demo exec deploy/nosuch -- true\n"
            "kubectl apply -f deploy/examples/nosuch.yaml\n"
            "docker build -t rightsizer:9.9.9 .\n"
        ),
        None,
    )
    found = [p.split(": ", 1)[1] for p in problems_of(wrong)]
    assert found == [
        "rightsizer-exporter has no --intervall",
        "--precision fp7 is not offered",
        "--format xml is not offered",
        "no Deployment demo/nosuch in deploy/",
        "no deploy/examples/nosuch.yaml in the repository",
        "no file deploy/examples/nosuch.yaml",
        "deploy/base runs no image rightsizer:9.9.9",
    ]


def test_command_substitutions_are_commands_of_their_own() -> None:
    image = "ghcr.io/rightsizer/rightsizer:0.1.0"
    script = f"docker build -t {image} --build-arg REVISION=$(git rev-parse --short HEAD) .\n"
    assert commands(script) == [
        ["git", "rev-parse", "--short", "HEAD"],
        ["docker", "build", "-t", image, "--build-arg", "REVISION=SUBSTITUTED", "."],
    ]
    assert problems_of(Block("README.md", 1, "sh", script, None)) == []  # --short is git's, not docker's
