"""A report over another window than the exporters' status pages judge says so, in every format
(a page saying B200 beside a report saying "add replicas" is then no riddle); over the same window
it says nothing. The exporters judge rightsizing.window_seconds, 1 h by default."""

from __future__ import annotations

from report_files import Written, fleet  # noqa: F401
from test_report_markdown import sections

SAID = (
    "this report judges 30 min; each exporter's status page and /api/v1/rightsizing judge its last 1 h "
    "(rightsizing.window_seconds), so a verdict there may differ from this one."
)


def test_another_window_is_said_in_every_format(fleet: Written) -> None:  # noqa: F811
    text = fleet.run("--window", "30m")
    assert text.returncode == 0, text.stderr
    assert f"Windows: {SAID}" in text.stdout
    markdown = fleet.run("--window", "30m", "--format", "markdown")
    summary = {r["Figure"]: r["Value"] for r in sections(markdown.stdout)["Summary"][0]}
    assert summary["Windows"] == SAID, summary
    html = fleet.run("--window", "30m", "--format", "html")
    assert '<p class="note" id="windows">Windows: ' in html.stdout
    assert "judge its last 1 h (rightsizing.window_seconds)" in html.stdout


def test_the_same_window_says_nothing(fleet: Written) -> None:  # noqa: F811
    """The shared report files (written once per test run) are over 1 h, the exporters' window."""
    assert fleet.json["totals"]["live_window_seconds"] == 3600
    assert "Windows" not in fleet.markdown and 'id="windows"' not in fleet.html
    text = fleet.run()
    assert text.returncode == 0 and "Windows:" not in text.stdout
