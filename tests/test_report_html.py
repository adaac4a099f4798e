"""``rightsizer report --format html --output F`` from a real Prometheus holding an hour of scenario
history: one self-contained file (nothing to fetch, no script), one row per judged GPU or MIG
instance with the JSON report's verdicts (and the scenario files'), charts drawn from range
queries, the assumptions stated, and label values escaped. The same file in a real browser is
test_report_browser.py; the Markdown report is test_report_markdown.py."""

from __future__ import annotations

import http.server
import json
import re
import threading
import urllib.request
from pathlib import Path

from html_tree import Element, parse
from report_files import HOUR, STEP, Written, report

# Attributes through which a document makes the browser fetch (or run) something.
FETCHING = ("src", "href", "srcset", "action", "formaction", "poster", "data", "xlink:href", "background")


def test_the_file_is_self_contained(fleet: Written) -> None:
    doc = parse(fleet.html)
    refs = [(e.tag, k, e.attrs[k]) for e in doc.iter() for k in FETCHING if k in e.attrs]
    assert refs == [("link", "href", "data:,")]  # the empty icon, so no browser asks for /favicon.ico
    assert doc.find_all("script") == [] and doc.find_all("iframe") == [] and doc.find_all("img") == []
    style = "".join(s.text for s in doc.find_all("style"))
    assert style and "url(" not in style and "@import" not in style
    assert not [e for e in doc.iter() if any(k.startswith("on") for k in e.attrs)]
    assert fleet.html.startswith("<!doctype html>") and "</html>" in fleet.html


def _rows(doc: Element) -> list[tuple[str, str, str, str]]:
    return [
        (r.attrs["data-instance"], r.attrs["data-uuid"], r.attrs["data-mig-profile"], r.attrs["data-verdict"])
        for r in doc.find_all("tr", "gpu")
    ]


def test_one_row_per_judged_unit_with_the_json_and_scenario_verdicts(fleet: Written) -> None:
    data = fleet.json
    want = [(g["instance"], g["uuid"], g["mig_profile"] or "", g["verdict"]) for g in data["gpus"]]
    doc = parse(fleet.html)
    assert _rows(doc) == want  # the same units, verdicts and order (most money first)
    expected = {}
    for f in fleet.fleets:
        for g in f.source.scenario.gpus:
            units = [(g.uuid, "", g.expect)]
            if g.mig:
                units = [(g.uuid, m.profile.name, m.expect) for m in g.mig]
            expected.update({(f.name, u, p): e.verdict for u, p, e in units if e is not None})
    assert {(i, u, p): v for i, u, p, v in _rows(doc)} == expected
    shown = [w.find_all("td")[1].text for w in doc.find_all("tr", "workload")]
    assert shown == [w["workload"] for w in data["workloads"]]
    costs = [[td.text for td in r.find_all("td")][:2] for r in doc.find_all("tr", "cost")]
    assert costs == [[c["queue"], c["server"]] for c in data["inference_costs"]] and costs
    # The summary's money is the JSON's.
    assert doc.find_all("div", "big")[1].text == f"${data['totals']['hourly_savings_dollars']:,.2f}/h"


def test_every_unit_has_its_charts_with_data_points(fleet: Written) -> None:
    doc = parse(fleet.html)
    charts = {(r.attrs["data-uuid"], i): r for i, r in enumerate(doc.find_all("tr", "charts"))}
    rows = doc.find_all("tr", "gpu")
    assert len(charts) == len(rows)
    for row, (_, chart_row) in zip(rows, sorted(charts.items(), key=lambda kv: kv[0][1]), strict=True):
        assert chart_row.attrs["data-uuid"] == row.attrs["data-uuid"]
        figures = chart_row.find_all("figure", "chart")
        titles = [f.find_all("figcaption")[0].text.split(" of ")[0] for f in figures]
        assert titles == ["Activity", "SM active vs GPU_UTIL", "Memory used", "DRAM active"]
        points = {t: int(f.attrs["data-points"]) for t, f in zip(titles, figures, strict=True)}
        # An hour at one point per 30 s step: 120 points, the first few of the hour without a sample.
        assert points["Activity"] >= HOUR / 30 - 4, (row.attrs, points)
        assert points["Memory used"] >= HOUR / 30 - 4, (row.attrs, points)
        assert all(n <= 2 * 120 for n in points.values()), "bounded points per chart"
        polyline = figures[0].find_all("polyline")
        assert polyline and len(polyline[0].attrs["points"].split()) >= 2


def test_the_assumptions_are_stated(fleet: Written) -> None:
    data = fleet.json
    a = data["assumptions"]
    doc = parse(fleet.html)
    facts = {dt.text: dd.text for dt, dd in zip(doc.find_all("dt"), doc.find_all("dd"), strict=True)}
    assert facts["Window"].startswith("1h: ") and facts["Idle after"] == "15 min"
    # An exposition every 15 s over the past hour: 3,585 s from the first to the last, to the second.
    assert facts["History found"] == "59 min 45 s"
    assert a["history_found_seconds"] == HOUR - STEP
    assert facts["Charts"].startswith("mean per 30 s step")
    thresholds = doc.find_all("table", "thresholds")[0].find_all("tr")[1:]
    assert [t.find_all("code")[0].text for t in thresholds] == [t["setting"] for t in a["thresholds"]]
    assert "rightsizing.bottlenecks.percentile" in {t["setting"] for t in a["thresholds"]}
    prices = {p.find_all("td")[0].text: p.find_all("td")[2].text for p in doc.find_all("tr", "price")}
    named = {g["current"] for g in data["gpus"]} | {g["recommended"] for g in data["gpus"]}
    assert named - {"release", "none", None} <= set(prices), "every GPU the report names has its price"
    assert all(source for source in prices.values())


def test_configured_thresholds_and_prices_are_marked(fleet: Written, tmp_path: Path) -> None:
    config = tmp_path / "exporter.yaml"
    config.write_text("rightsizing: {queue_growth_min: 3.0}\ncatalog: {prices: {L4-24GB: 0.55}}\n")
    out = fleet.run("--format", "html", "--exporter-config", str(config))
    assert out.returncode == 0, out.stderr
    doc = parse(out.stdout)
    marked = [r.find_all("code")[0].text for r in doc.find_all("tr", "set")]
    assert marked == ["rightsizing.queue_growth_min"]
    prices = {p.find_all("td")[0].text: p.find_all("td")[1].text + " " + p.find_all("td")[2].text
              for p in doc.find_all("tr", "price")}  # fmt: skip
    assert prices["L4-24GB"] == "$0.5500/h configured in catalog.prices"
    facts = {dt.text: dd.text for dt, dd in zip(doc.find_all("dt"), doc.find_all("dd"), strict=True)}
    assert facts["Settings from"] == str(config)


def test_label_values_are_escaped(hostile: Written) -> None:
    doc = parse(hostile.html)
    assert doc.find_all("script") == [] and doc.find_all("img") == []
    assert "llm" not in {b.text for b in doc.find_all("b")}  # the namespace "<b>llm</b>" is text
    assert not [e for e in doc.iter() if any(k.startswith("on") for k in e.attrs)]
    pods = {p.text for p in doc.find_all("span", "pod")}
    scenario = hostile.fleets[0].source.scenario
    assert pods == {g.pod.pod for g in scenario.gpus if g.pod is not None}
    assert "&lt;script&gt;document.title=" in hostile.html
    assert [r.attrs["data-verdict"] for r in doc.find_all("tr", "gpu")] == [
        g["verdict"] for g in hostile.json["gpus"]
    ]


def test_output_that_cannot_be_written_is_one_line(fleet: Written, tmp_path: Path) -> None:
    target = tmp_path / "no-such-dir" / "report.html"
    out = fleet.run("--format", "html", "--output", str(target))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == f"rightsizer: --output {target}: No such file or directory"
    assert not target.parent.exists()


def test_the_html_names_no_machine_it_was_not_asked_about(fleet: Written) -> None:
    """The only address in the file is the Prometheus the report was asked to read."""
    addresses = set(re.findall(r"https?://[^\s<\"']+", fleet.html))
    assert addresses == {fleet.url}


class _RangeRefusingProxy(http.server.BaseHTTPRequestHandler):
    """Passes instant queries to the real Prometheus; answers range queries as Prometheus does when
    a query would load more samples than its --query.max-samples."""

    upstream = ""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path.endswith("/query_range"):
            error = "query processing would load too many samples into memory in query execution"
            status = 422
            answer = json.dumps({"status": "error", "errorType": "execution", "error": error}).encode()
        else:
            req = urllib.request.Request(self.upstream + self.path, data=body, headers=dict(self.headers))
            with urllib.request.urlopen(req, timeout=30) as resp:
                status, answer = resp.status, resp.read()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


def test_without_range_queries_the_report_is_written_without_charts_and_says_why(fleet: Written) -> None:
    handler = type("Proxy", (_RangeRefusingProxy,), {"upstream": fleet.url})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        out = report(url, fleet.at, "--format", "html")
    finally:
        server.shutdown()
        thread.join(10)
    assert out.returncode == 0 and "Traceback" not in out.stderr
    said = out.stderr.strip()
    assert "\n" not in said
    lead = f"rightsizer: the report is written without charts: Prometheus at {url} answered 422 "
    assert said.startswith(lead)
    assert said.endswith(": query processing would load too many samples into memory in query execution")
    doc = parse(out.stdout)
    verdicts = [r.attrs["data-verdict"] for r in doc.find_all("tr", "gpu")]
    assert verdicts == [g["verdict"] for g in fleet.json["gpus"]]
    assert doc.find_all("tr", "charts") == []
    facts = {dt.text: dd.text for dt, dd in zip(doc.find_all("dt"), doc.find_all("dd"), strict=True)}
    assert facts["Charts"].startswith("left out: ") and "too many samples" in facts["Charts"]
