"""Every command's ``--help`` carries examples, environment variables and exit codes (the exporter's
also its built-in scenarios), its examples are valid command lines, a mistyped flag is answered
with the close one, and the exporter's start line names the status page's URL."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from collections.abc import Callable

import pytest
from servers import exporter

from adapter.cli import parser as adapter_parser
from exporter.cli import page_url
from exporter.cli import parser as exporter_parser
from exporter.sources.simulated.scenario import builtin_names
from rightsizing.command.cli import parser as rightsizer_parser

RIGHTSIZER = [sys.executable, "-m", "rightsizing.command.cli"]
COMMANDS: dict[str, tuple[list[str], Callable[[], object], list[str]]] = {
    # name: (how to run it, its parser, the words before its own flags)
    "rightsizer-exporter": ([sys.executable, "-m", "exporter"], exporter_parser, []),
    "rightsizer-adapter": ([sys.executable, "-m", "adapter"], adapter_parser, []),
    "rightsizer": (RIGHTSIZER, rightsizer_parser, []),
    "rightsizer plan": ([*RIGHTSIZER, "plan"], rightsizer_parser, ["plan"]),
    "rightsizer report": ([*RIGHTSIZER, "report"], rightsizer_parser, ["report"]),
}


def run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def sections(text: str) -> dict[str, list[str]]:
    """The help's epilog sections ("examples:", …) and their indented lines."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if re.fullmatch(r"[a-z][a-z ()-]*(--simulate NAME\))?:", line):
            current = out.setdefault(line[:-1], [])
        elif current is not None and line.startswith("  "):
            current.append(line.strip())
        elif not line.strip():
            current = None
    return out


@pytest.mark.parametrize("name", COMMANDS)
def test_help_has_examples_environment_and_exit_codes(name: str) -> None:
    cmd, make_parser, before = COMMANDS[name]
    out = run([*cmd, "--help"])
    assert out.returncode == 0, out.stderr
    found = sections(out.stdout)
    assert [s for s in ("examples", "environment", "exit codes") if not found.get(s)] == [], out.stdout
    assert any(line.startswith("0 ") for line in found["exit codes"])
    assert any(line.startswith("2 ") for line in found["exit codes"])
    examples = [line for line in found["examples"] if not line.startswith("#")]
    assert examples
    parser = make_parser()
    for example in examples:
        words = shlex.split(example)
        program = name.split()[0]
        assert words[0] == program, example
        if name == "rightsizer":
            continue  # the top level's examples name commands, each checked by its own help
        assert words[1 : 1 + len(before)] == before, example
        parser.parse_args(words[1:])  # type: ignore[attr-defined]  # a valid command line


def test_exporter_help_lists_the_builtin_scenarios() -> None:
    out = run([*COMMANDS["rightsizer-exporter"][0], "--help"])
    listed = sections(out.stdout)["built-in scenarios (--simulate NAME)"]
    assert [line.split()[0] for line in listed] == builtin_names()
    assert all(len(line.split()) > 1 for line in listed), "each scenario has its description"


def test_plan_examples_run() -> None:
    """The offline ones (no file to read) print a plan and exit 0."""
    out = run([*COMMANDS["rightsizer plan"][0], "--help"])
    for example in sections(out.stdout)["examples"]:
        if example.startswith("#") or "--config" in example or "--exporter-config" in example:
            continue
        words = shlex.split(example)[2:]
        result = run([*COMMANDS["rightsizer plan"][0], *words])
        assert result.returncode == 0, (example, result.stderr)


@pytest.mark.parametrize(
    ("name", "args", "meant"),
    [
        ("rightsizer plan", ["--parms", "7B"], "--params"),
        ("rightsizer report", ["--promethus-url", "http://127.0.0.1:1"], "--prometheus-url"),
        ("rightsizer-adapter", ["--promethus-url=http://127.0.0.1:1", "--check-config"], "--prometheus-url"),
        ("rightsizer-exporter", ["--intervall", "2", "--check-config"], "--interval"),
    ],
)
def test_a_typo_names_the_close_flag(name: str, args: list[str], meant: str) -> None:
    out = run([*COMMANDS[name][0], *args])
    assert out.returncode == 2
    assert out.stderr.splitlines()[-1].endswith(
        f"unrecognized argument {args[0].split('=')[0]}; did you mean {meant}?"
    )
    assert "is required" not in out.stderr


@pytest.mark.parametrize(
    ("args", "last_line"),
    [
        (["reprot", "--prometheus-url", "http://127.0.0.1:1"], "unknown command 'reprot' (commands: plan, "
         "report); did you mean report?"),
        (["paln", "--params", "7B"], "unknown command 'paln' (commands: plan, report); did you mean plan?"),
        (["status"], "unknown command 'status' (commands: plan, report)"),
    ],
)  # fmt: skip
def test_a_mistyped_command_names_the_close_one(args: list[str], last_line: str) -> None:
    out = run([*RIGHTSIZER, *args])
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines()[-1] == f"rightsizer: error: {last_line}", out.stderr


@pytest.mark.parametrize(
    ("name", "args", "meant"),
    [
        ("rightsizer plan", ["--param", "7B"], "--params"),
        ("rightsizer report", ["--prometheus", "http://127.0.0.1:1"], "--prometheus-url"),
        ("rightsizer-adapter", ["--check-conf"], "--check-config"),
        ("rightsizer-exporter", ["--simulat", "--check-config"], "--simulate"),
        ("rightsizer-exporter", ["--check-conf"], "--check-config"),
    ],
)
def test_abbreviations_are_refused_and_the_flag_named(name: str, args: list[str], meant: str) -> None:
    """A flag is written whole: an abbreviation accepted today could mean another flag tomorrow."""
    out = run([*COMMANDS[name][0], *args])
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines()[-1].endswith(
        f"unrecognized argument {args[0].split('=')[0]}; did you mean {meant}?"
    )
    for make_parser in (adapter_parser, exporter_parser, rightsizer_parser):
        parser = make_parser()
        assert not parser.allow_abbrev
        subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        assert all(not p.allow_abbrev for a in subcommands for p in a.choices.values())


def test_page_url() -> None:
    assert page_url([("0.0.0.0", 9430), ("::", 9430, 0, 0)]) == "http://localhost:9430/"
    assert page_url([("127.0.0.1", 19430)]) == "http://127.0.0.1:19430/"
    assert page_url([("::1", 9430, 0, 0)]) == "http://[::1]:9430/"


def test_start_line_names_the_status_page() -> None:
    with exporter(["--simulate", "golden"]) as p:
        (line,) = [line for line in p.log().splitlines() if "msg=listening" in line]
        assert f"url={p.url}/ " in line
