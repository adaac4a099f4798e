"""The status page's server side: what ``/`` answers, that it is rendered once per published cycle
(on request, never by the sampling loop), that label values reach the HTML escaped, and that a GPU
the engine has not judged is shown as unknown rather than as a healthy zero. The browser's view of
the same page is in test_status_browser.py."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from fakes import FakeSource

from exporter.render import Renderer
from exporter.rightsizing_live.extension import RightsizingExtension
from exporter.sampler import Sampler
from exporter.server import STATUS_PAGE, create_app
from exporter.sources.simulated.scenario import SCENARIO_DIR
from exporter.sources.simulated.source import SimulatedSource, load_scenario
from rightsizing.catalog import load_catalog
from rightsizing.settings import RightsizingSettings
from rightsizing.windows import Window

HOSTILE = Path(__file__).parent / "scenarios" / "status_hostile_labels.yaml"


async def _sampler(scenario: str) -> Sampler:
    source = SimulatedSource(load_scenario(scenario))
    ext = RightsizingExtension(RightsizingSettings(), load_catalog(), 1.0, source)
    return Sampler(source, Renderer(), interval=3600, hostname="node-a", extensions=[ext])


@pytest.fixture
async def default_fleet() -> AsyncIterator[Sampler]:
    s = await _sampler(str(SCENARIO_DIR / "default.yaml"))
    await s.start()
    yield s
    await s.stop()


async def test_rendered_once_per_cycle_on_request(aiohttp_client: Any, default_fleet: Sampler) -> None:
    client: TestClient = await aiohttp_client(create_app(default_fleet))
    page = client.app[STATUS_PAGE]
    first = await client.get("/")
    assert first.status == 200 and first.content_type == "text/html"
    body = await first.read()
    assert (await (await client.get("/")).read()) == body
    assert page.renders == 1
    await default_fleet.cycle()  # the sampling loop publishes a cycle: it renders no page
    assert page.renders == 1
    await client.get("/")
    assert page.renders == 2


async def test_rows_verdicts_and_charts_in_the_html(aiohttp_client: Any, default_fleet: Sampler) -> None:
    client: TestClient = await aiohttp_client(create_app(default_fleet))
    html = await (await client.get("/")).text()
    scenario = load_scenario(str(SCENARIO_DIR / "default.yaml"))
    rows = dict(re.findall(r'<tr class="gpu" data-uuid="([^"]+)" data-verdict="([^"]+)"', html))
    assert rows == {g.uuid: g.expect.verdict for g in scenario.gpus if g.expect is not None}
    assert len(rows) == len(scenario.gpus)
    points = [int(n) for n in re.findall(r'<figure class="chart" data-points="(\d+)"', html)]
    assert len(points) == 4 * len(scenario.gpus) and sum(p > 0 for p in points) >= 2 * len(scenario.gpus)
    # Nothing is fetched from elsewhere: no scheme-qualified URL in any src or href.
    assert not re.search(r'(src|href)="(https?:)?//', html)


async def test_content_security_policy_allows_only_the_page_script(
    aiohttp_client: Any, default_fleet: Sampler
) -> None:
    client: TestClient = await aiohttp_client(create_app(default_fleet))
    response = await client.get("/")
    csp = response.headers["Content-Security-Policy"]
    (script,) = re.findall(r"<script>(.*?)</script>", await response.text(), re.S)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp and "default-src 'none'" in csp


async def test_label_values_are_escaped(aiohttp_client: Any) -> None:
    sampler = await _sampler(str(HOSTILE))
    await sampler.start()
    try:
        client: TestClient = await aiohttp_client(create_app(sampler))
        html = await (await client.get("/")).text()
    finally:
        await sampler.stop()
    assert html.count("<script") == 1  # the page's own
    assert "&lt;script&gt;document.title=&#x27;pwned&#x27;" in html
    assert "<b>llm</b>" not in html and "&lt;b&gt;llm&lt;/b&gt;" in html
    assert "<img" not in html and 'x" onmouseover' not in html


async def test_unjudged_gpus_are_unknown_not_zero(aiohttp_client: Any) -> None:
    """Without right-sizing there is no verdict and no saving to show: the page says so."""
    sampler = Sampler(FakeSource(2), Renderer(), interval=3600, hostname="node-a")
    await sampler.start()
    try:
        client: TestClient = await aiohttp_client(create_app(sampler))
        html = await (await client.get("/")).text()
    finally:
        await sampler.stop()
    assert html.count('data-verdict="unknown"') == 2
    assert "right-sizing is off" in html and "$0.00" not in html


async def test_before_the_first_sample_a_plain_page_links_the_apis(aiohttp_client: Any) -> None:
    sampler = Sampler(FakeSource(1), Renderer(), interval=3600, hostname="node-a")
    client: TestClient = await aiohttp_client(create_app(sampler))
    response = await client.get("/")
    assert response.status == 200 and 'href="/metrics"' in await response.text()


def test_window_bucket_series_reads_each_bucket() -> None:
    w = Window(60, ("a", "b"), bucket_count=6)  # 10 s buckets
    for t, a in ((0, 0.2), (1, 0.4), (25, 0.9)):
        w.add(t, (a, None))
    series = w.bucket_series(0)
    assert [start for start, _, _ in series] == [-30, -20, -10, 0, 10, 20]
    means = [m for _, m, _ in series]
    assert means[:3] == [None, None, None] and means[4] is None
    assert means[3] == pytest.approx(0.3, abs=0.01) and means[5] == pytest.approx(0.9, abs=0.01)
    assert [mx for _, _, mx in series][3] == 0.4
    assert all(m is None for _, m, _ in w.bucket_series(1))  # a signal without values: no points
    memo: dict[int, tuple[float | None, float | None]] = {}
    assert w.bucket_series(0, memo) == series
    assert sorted(memo) == [-3, -2, -1, 0, 1]  # finished buckets only: the newest still changes
    w.add(29, (0.1, None))
    assert w.bucket_series(0, memo)[5][1] == pytest.approx(0.5, abs=0.01)


async def test_mig_instances_have_rows_of_their_own(aiohttp_client: Any) -> None:
    """One row per MIG instance with the engine's verdict; the parent GPU's row says it is judged
    through them (and is not counted as unjudged). (The verdicts are the engine's, from
    /api/v1/gpus: the mig scenario's ``expect`` is not held by the scenario suite.)"""
    scenario = load_scenario("mig")
    sampler = await _sampler("mig")
    await sampler.start()
    try:
        client: TestClient = await aiohttp_client(create_app(sampler))
        html = await (await client.get("/")).text()
        api = await (await client.get("/api/v1/gpus")).json()
    finally:
        await sampler.stop()
    rows = dict(re.findall(r'<tr class="gpu" data-uuid="([^"]+)" data-verdict="([^"]+)"', html))
    engine = {
        g["uuid"]: g["rightsizing"]["verdict"] if "rightsizing" in g else "unknown" for g in api["gpus"]
    }
    assert rows == engine
    instances = {m.uuid for g in scenario.gpus for m in g.mig}
    parents = {g.uuid for g in scenario.gpus if g.mig}
    assert instances and instances <= set(rows) and all(rows[u] != "unknown" for u in instances)
    assert {rows[u] for u in parents} == {"unknown"}
    assert "judged through its MIG instances" in html and "not judged" not in html


async def test_the_page_says_which_window_it_judges(aiohttp_client: Any, default_fleet: Sampler) -> None:
    """The default window is an hour; the report judges its own --window and may differ."""
    client: TestClient = await aiohttp_client(create_app(default_fleet))
    html = (await (await client.get("/")).read()).decode()
    note = html[html.index('<p class="note" id="window-note">') :]
    assert note.startswith(
        '<p class="note" id="window-note">Verdicts judge this exporter\'s last 1 h '
        "(rightsizing.window_seconds); rightsizer report judges the window it is given "
        "(--window, 7 d by default) from Prometheus"
    ), note[:300]
