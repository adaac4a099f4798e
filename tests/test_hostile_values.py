"""Values that passed a check and then failed, or failed with a traceback: each is now one line on
stderr naming what is wrong, exit code 2, before anything runs. The real programs are run as a user
runs them (``python -m exporter`` / ``adapter`` / ``rightsizing.command.cli``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hostile_runs import run_program

WORKLOAD = {"kind": "steady_inference"}


def scenario(tmp: Path, **workload: object) -> Path:
    gpu = {
        "model": "H100-SXM-80GB",
        "workload": {**WORKLOAD, **workload},
        "queue": {"name": "q", "server": "vllm"},
    }
    path = tmp / "scenario.yaml"
    path.write_text(yaml.safe_dump({"gpus": [gpu]}).replace("'.inf'", ".inf"))
    return path


def refused(tmp: Path, program: str, args: list[str], *words: str) -> None:
    outcome = run_program(program, args, tmp)
    assert outcome.returncode == 2, (outcome.returncode, outcome.stderr[-2000:])
    text = outcome.stdout + outcome.stderr
    assert "Traceback" not in text, text
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1, outcome.stderr
    for word in words:
        assert word in lines[0], lines[0]


# Each passed --check-config and then stopped the exporter at start with a traceback: an infinite
# queue depth or token rate overflows round(), 1e308 items an hour overflows over the history, a
# period of 0 divides by zero and one of 1e-300 takes sin() of infinity.
SCENARIO_VALUES = {
    "queue_depth .inf": ({"queue_depth": ".inf"}, "queue_depth: must be at most 1000000000.0; got inf"),
    "queue_growth_per_hour 1e308": (
        {"queue_growth_per_hour": 1e308},
        "queue_growth_per_hour: must be at most 1000000000.0; got 1e+308",
    ),
    "generated_tokens_per_second .inf": (
        {"generated_tokens_per_second": ".inf"},
        "generated_tokens_per_second: must be at most 1000000000.0; got inf",
    ),
    "period_seconds 0": ({"period_seconds": 0}, "period_seconds: must be at least 1; got 0"),
    "period_seconds 1e-300": ({"period_seconds": 1e-300}, "period_seconds: must be at least 1; got 1e-300"),
}


@pytest.mark.parametrize("case", list(SCENARIO_VALUES))
@pytest.mark.parametrize("how", ["--check-config", "start"])
def test_scenario_values_that_crashed_the_start_are_refused_by_the_check(
    tmp_path: Path, case: str, how: str
) -> None:
    workload, message = SCENARIO_VALUES[case]
    path = scenario(tmp_path, **workload)
    args = [
        "--simulate",
        str(path),
        *(["--check-config"] if how == "--check-config" else ["--listen", "127.0.0.1:0"]),
    ]
    refused(tmp_path, "exporter", args, str(path), message)


DUPLICATES = {
    "exporter": (
        ["--config"],
        "interval: 1\nlisten: 127.0.0.1:0\ninterval: 5\n",
        "key 'interval' is given twice (first at line 1)",
    ),
    "adapter": (
        ["--insecure-http", "--exporter", "http://127.0.0.1:1", "--config"],
        "refresh_interval_seconds: 1\nrules: []\nrefresh_interval_seconds: 2\n",
        "key 'refresh_interval_seconds' is given twice (first at line 1)",
    ),
    "exporter scenario": (
        ["--simulate"],
        "gpus:\n  - model: L4-24GB\n    workload: {kind: idle}\n    model: H100-SXM-80GB\n",
        "key 'model' is given twice (first at line 2)",
    ),
}


@pytest.mark.parametrize("case", list(DUPLICATES))
def test_a_key_given_twice_is_refused_not_silently_the_last(tmp_path: Path, case: str) -> None:
    args, text, message = DUPLICATES[case]
    path = tmp_path / "config.yaml"
    path.write_text(text)
    program = "adapter" if case == "adapter" else "exporter"
    refused(
        tmp_path,
        program,
        [*args, str(path), "--check-config"],
        str(path),
        "line 3" if case != "exporter scenario" else "line 4",
        message,
    )


def test_a_merge_may_still_give_keys_again(tmp_path: Path) -> None:
    """A merge (``<<: *entry``) brings keys in to be overridden: that is not a key given twice."""
    path = tmp_path / "config.yaml"
    path.write_text(
        "queues:\n"
        "  - &jobs {name: jobs, kind: redis, url: 'redis://127.0.0.1:1/0', key: jobs}\n"
        "  - <<: *jobs\n"
        "    name: retries\n"
        "    key: retries\n"
    )
    outcome = run_program("exporter", ["--config", str(path), "--simulate", "--check-config"], tmp_path)
    assert outcome.returncode == 0, outcome.stderr


RIGHTSIZER = "rightsizing.command.cli"


def test_plan_config_with_a_301_digit_hidden_size(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"hidden_size": 1' + "0" * 300 + ', "num_hidden_layers": 32, "num_attention_heads": 32}')
    refused(
        tmp_path, RIGHTSIZER, ["plan", "--config", str(path)], "'hidden_size' must be at most 1,000,000,000"
    )


def test_plan_params_too_large_says_so(tmp_path: Path) -> None:
    refused(tmp_path, RIGHTSIZER, ["plan", "--params", "1e300B"], "more than 100 trillion parameters")


@pytest.mark.parametrize("timeout", ["inf", "nan", "-1"])
def test_report_timeout_must_be_a_finite_positive_number(tmp_path: Path, timeout: str) -> None:
    args = ["report", "--prometheus-url", "http://127.0.0.1:1", "--timeout", timeout]
    refused(tmp_path, RIGHTSIZER, args, "--timeout must be positive and at most 86400 seconds")


def test_report_bearer_token_with_a_line_break(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc\nX-Injected: yes\n")
    args = ["report", "--prometheus-url", "http://127.0.0.1:1", "--bearer-token-file", str(token)]
    refused(tmp_path, RIGHTSIZER, args, f"--bearer-token-file {token}: holds a line break")
