"""Direct mode's regex matchers select what Prometheus 3 selects for label values holding a newline.

Prometheus 3 made ``.`` in a regex matcher match a newline (2.x did not); the adapter evaluates the
rules' ``match`` matchers itself in direct mode and renders them into PromQL in Prometheus mode, so
both modes must agree with the Prometheus of today. Written before running, from the 3.0 migration
notes: ``=~"a.b"`` selects ``a<newline>b``, ``=~"a.*"`` selects ``a<newline>tail``, ``!~"a.*"``
leaves both out; then checked against a real Prometheus 3.5 scraping those series.
"""

from __future__ import annotations

import pytest
from queue_servers import FakeHttpServer
from servers import prom_query, prometheus, prometheus3, wait_for

from adapter.promql import parse_matcher

VALUES = ["a\nb", "ab", "a\ntail", "x"]
MATCHERS = ['q=~"a.b"', 'q=~"a.*"', 'q!~"a.*"', 'q=~".*b"', 'q=~"a.?b"']
# What Prometheus 3 selects (from its migration notes), value by value.
EXPECTED = {
    'q=~"a.b"': {"a\nb"},
    'q=~"a.*"': {"a\nb", "ab", "a\ntail"},
    'q!~"a.*"': {"x"},
    'q=~".*b"': {"a\nb", "ab"},
    'q=~"a.?b"': {"a\nb", "ab"},
}


@pytest.mark.parametrize("matcher", MATCHERS)
def test_direct_mode_matches_newlines_as_prometheus_3(matcher: str) -> None:
    m = parse_matcher(matcher)
    assert {v for v in VALUES if m.matches({"q": v})} == EXPECTED[matcher]


def test_prometheus_3_selects_the_same() -> None:
    build = prometheus3()
    if build is None:
        pytest.skip("Prometheus 3.5 is not in .tools/prometheus3: run scripts/prometheus3")
    escaped = [v.replace("\n", "\\n") for v in VALUES]
    body = "".join(f'probe{{q="{v}"}} 1\n' for v in escaped).encode()
    with FakeHttpServer() as target:
        target.route("/metrics", body=body)
        with prometheus({"probe": [target.url("").removeprefix("http://")]}, binary=build.prometheus) as prom:
            wait_for(lambda: len(prom_query(prom.url, "probe")) == len(VALUES), 30, what="the probe series")
            for matcher in MATCHERS:
                got = {s["metric"]["q"] for s in prom_query(prom.url, f"probe{{{matcher}}}")}
                assert got == EXPECTED[matcher], matcher
