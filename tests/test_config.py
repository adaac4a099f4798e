"""Configuration: schema errors name the file, key and value; env overrides file; flags win."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.config import ExporterConfig, load_config
from rightsizer_core.listen import parse_listen
from rightsizer_core.settings import ConfigError, describe_settings


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "rightsizer.yaml"
    path.write_text(text)
    return str(path)


def test_defaults() -> None:
    cfg = load_config(None, {}, environ={})
    assert cfg.listen == ":9430" and cfg.interval == 1.0 and cfg.hostname_label == "Hostname"
    assert cfg.nvml.call_timeout_seconds == 2.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("intervall: 2\n", "unknown key 'intervall'"),
        ("interval: fast\n", "interval: must be a number; got 'fast'"),
        ("interval: 0\n", "interval: must be at least 0.05; got 0"),
        ("hostname_label: host\n", "hostname_label: must be one of Hostname, hostname; got 'host'"),
        ("nvml:\n  call_timeout_seconds: -1\n", "nvml.call_timeout_seconds: must be at least 0.05"),
        ("nvml:\n  bogus: 1\n", "nvml: unknown key 'bogus'"),
        ("listen: nope\n", "listen must be HOST:PORT"),
        ("- a\n- b\n", "must be a YAML mapping"),
        ("interval: [1\n", "not valid YAML at line"),
    ],
)
def test_bad_file_names_file_key_and_value(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_config(path, {}, environ={})
    assert str(exc.value).startswith(path)
    assert message in str(exc.value)


@pytest.mark.parametrize(
    ("text", "meant"),
    [
        ("intervall: 2\n", "interval"),
        ("nvml:\n  call_timout: 1\n", "call_timeout_seconds"),
        ("queues:\n  - {name: q, kind: redis, url: 'redis://127.0.0.1:1/0', kee: jobs}\n", "key"),
        ("rightsizing:\n  windw_seconds: 600\n", "window_seconds"),
    ],
)
def test_an_unknown_key_names_the_close_one(tmp_path: Path, text: str, meant: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, text), {}, environ={})
    assert str(exc.value).endswith(f"); did you mean {meant!r}?"), str(exc.value)


def test_an_unknown_key_far_from_every_key_gets_no_guess(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, "nvml:\n  bogus: 1\n"), {}, environ={})
    assert "did you mean" not in str(exc.value) and str(exc.value).endswith(")")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(str(tmp_path / "absent.yaml"), {}, environ={})


def test_precedence_flags_over_env_over_file(tmp_path: Path) -> None:
    path = write(tmp_path, "interval: 5\nlisten: 127.0.0.1:1000\nnvml:\n  call_timeout_seconds: 3\n")
    env = {"RIGHTSIZER_INTERVAL": "2", "RIGHTSIZER_NVML_CALL_TIMEOUT_SECONDS": "4"}
    cfg = load_config(path, {"interval": "0.5", "listen": None}, environ=env)
    assert cfg.interval == 0.5  # flag
    assert cfg.listen == "127.0.0.1:1000"  # file (flag not given)
    assert cfg.nvml.call_timeout_seconds == 4.0  # env over file


def test_bad_env_is_attributed_to_the_environment() -> None:
    with pytest.raises(ConfigError, match=r"environment \(RIGHTSIZER_\*\): interval: must be a number"):
        load_config(None, {}, environ={"RIGHTSIZER_INTERVAL": "soon"})


def test_bad_flag_is_attributed_to_the_command_line() -> None:
    with pytest.raises(ConfigError, match="command line: interval: must be at least"):
        load_config(None, {"interval": "0"}, environ={})


@pytest.mark.parametrize(
    ("listen", "parsed"),
    [(":9430", (None, 9430)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("[::1]:80", ("::1", 80))],
)
def test_parse_listen(listen: str, parsed: tuple[str | None, int]) -> None:
    assert parse_listen(listen) == parsed


def test_every_setting_is_documented() -> None:
    rows = describe_settings(ExporterConfig)
    assert rows and all(doc for _, _, _, doc in rows), [key for key, _, _, doc in rows if not doc]
