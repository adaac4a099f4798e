"""A latency histogram is checked before it counts: garbage is refused for the poll with one reason,
never used, and everything recovers on the next good page.

The reader is fed vLLM pages with one fault each; end to end, a real exporter polls a vLLM page that
turns hostile (negative ``le`` bounds, which gave an SLO ratio of -2; counts near 1.7e308, which
made the SLO counters NaN and put a bare NaN in /api/v1/rightsizing) and healthy again, with a TTFT
SLO declared. Expected values are worked out from the observations in the comments.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from latency_servers import Series, scrape_series
from queue_servers import FakeHttpServer
from servers import Process, exporter, http_get, wait_for

from exporter.sources.queues.histogram_series import MAX_BOUNDS
from exporter.sources.queues.scrape import PRESETS, ExpositionReader
from rightsizer_core import strict_json
from rightsizing.command.output import to_json

TTFT = "vllm:time_to_first_token_seconds"
LABELS = 'engine="0",model_name="m"'
# 150 requests at 0.2 s and 50 at 0.9 s on vLLM-like bounds: cumulative 0 / 150 / 150 / 150 / 200 / 200
GOOD = [("0.1", "0"), ("0.25", "150"), ("0.5", "150"), ("0.75", "150"), ("1.0", "200"), ("+Inf", "200")]


def page(buckets: list[tuple[str, str]], total: str = "75.0", count: str | None = None,
         labels: str = LABELS, depth: str = "3") -> str:  # fmt: skip
    lines = [f"vllm:num_requests_waiting{{{labels}}} {depth}", f"# TYPE {TTFT} histogram"]
    lines += [f'{TTFT}_bucket{{{labels},le="{le}"}} {n}' for le, n in buckets]
    lines.append(f"{TTFT}_sum{{{labels}}} {total}")
    lines.append(f"{TTFT}_count{{{labels}}} {buckets[-1][1] if count is None else count}")
    return "\n".join(lines) + "\n"


def swap(buckets: list[tuple[str, str]], at: int, le: str | None = None, n: str | None = None) -> list:
    out = list(buckets)
    out[at] = (out[at][0] if le is None else le, out[at][1] if n is None else n)
    return out


FAULTS = {
    "negative le": (page([("-1.0", "200"), ("-0.5", "200"), ("+Inf", "200")]), "an le bound is negative"),
    "-Inf le": (page([("-Inf", "0"), *GOOD]), "an le bound is negative"),
    "NaN le": (page(swap(GOOD, 2, le="NaN")), "an le bound is NaN"),
    "le not a number": (page(swap(GOOD, 2, le="fast")), "an le bound is not a number"),
    "le in other digits": (page(swap(GOOD, 2, le="\u0660.\u0665")), "an le bound is not a number"),
    "decreasing le": (page([GOOD[0], GOOD[2], GOOD[1], *GOOD[3:]]), "le bounds go down (not ascending)"),
    "repeated le": (page([GOOD[0], GOOD[1], GOOD[1], *GOOD[2:]]), "an le bound repeats"),
    "NaN count": (page(swap(GOOD, 3, n="NaN")), "a bucket count is NaN"),
    "infinite count": (page(swap(GOOD, 5, n="+Inf"), count="200"), "a bucket count is infinite"),
    "negative count": (page(swap(GOOD, 0, n="-5")), "a bucket count is negative"),
    "count near max float": (
        page(swap(swap(GOOD, 4, n="1.7e308"), 5, n="1.7e308")),
        "a bucket count is over 2^53",
    ),
    "NaN sum": (page(GOOD, total="NaN"), "a _sum is NaN"),
    "negative sum": (page(GOOD, total="-3"), "a _sum is negative"),
    "sum near max float": (page(GOOD, total="1.7e308"), "a _sum is over 2^53"),
    "counts go down": (page(swap(GOOD, 4, n="120")), "bucket counts go down as le goes up"),
    "_count disagrees": (page(GOOD, count="201"), "_count disagrees with the +Inf bucket"),
    "no +Inf bucket": (page(GOOD[:-1], count="200"), "a series has no +Inf bucket"),
    "a line that does not parse": (
        page(GOOD).replace('le="0.5"} 150', 'le="0.5"} 150 1 2'),
        "a line does not parse",
    ),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_a_broken_histogram_is_refused_with_its_reason_and_the_depth_kept(fault: str) -> None:
    text, why = FAULTS[fault]
    value = ExpositionReader(PRESETS["vllm"], {}).read(text, False)
    assert value.depth == 3
    assert value.latency is None or "ttft" not in value.latency
    assert value.latency_refused == {"ttft": f"{TTFT}: {why}"}


def test_a_good_page_gives_the_histogram_and_no_reason() -> None:
    value = ExpositionReader(PRESETS["vllm"], {}).read(page(GOOD), False)
    assert value.latency is not None and value.latency_refused is None
    h = value.latency["ttft"]
    assert h.bounds == (0.1, 0.25, 0.5, 0.75, 1.0) and h.counts == (0, 150, 150, 150, 200, 200)
    assert h.total == 75.0


def test_series_are_checked_one_by_one_and_summed_on_the_bounds_they_share() -> None:
    # Two engines, each a valid histogram; the second lacks 0.5 s. Bucket counts of one series
    # listed among the other's are still that series' own (not a repeated bound).
    one = page(GOOD, labels='engine="0",model_name="m"')
    two = page(
        [("0.25", "10"), ("1.0", "30"), ("+Inf", "40")], total="12.0", labels='engine="1",model_name="m"'
    )
    mixed = one.splitlines()[2:5] + two.splitlines() + one.splitlines()[:2] + one.splitlines()[5:]
    value = ExpositionReader(PRESETS["vllm"], {}).read("\n".join(mixed) + "\n", False)
    assert value.latency is not None and value.latency_refused is None
    h = value.latency["ttft"]
    assert h.bounds == (0.25, 1.0) and h.counts == (160, 230, 240) and h.total == 87.0
    # one broken engine refuses the family: a sum over the others would be partial, not smaller
    bad = page(swap(GOOD, 1, n="-1"), labels='engine="1",model_name="m"')
    value = ExpositionReader(PRESETS["vllm"], {}).read(one + bad.split("\n", 1)[1], False)
    assert value.latency_refused == {"ttft": f"{TTFT}: a bucket count is negative"}


def test_a_layout_of_ten_thousand_bounds_is_thinned_with_exact_counts() -> None:
    bounds = [f"{0.001 * k:.3f}" for k in range(1, 9_001)]  # 1 ms .. 9 s (max_series: 10,000 lines)
    buckets = [(b, str(k)) for k, b in enumerate(bounds, start=1)] + [("+Inf", "9000")]
    value = ExpositionReader(PRESETS["vllm"], {}).read(page(buckets, total="40504.5"), False)
    assert value.latency is not None
    h = value.latency["ttft"]
    assert len(h.bounds) <= MAX_BOUNDS and h.bounds[-1] == 9.0  # the highest bound kept
    for b, c in zip(h.bounds, h.counts, strict=False):
        assert c == round(b * 1000)  # k requests at or under k ms: exact at every bound kept
    assert h.counts[-1] == 9000


def test_json_output_is_strict() -> None:
    data = {"a": math.nan, "b": [math.inf, 1.5, (-math.inf, 2)], "c": {"d": math.nan}, "e": "NaN"}
    for text in (strict_json.dumps(data), to_json(data)):
        assert strict(text) == {"a": None, "b": [None, 1.5, [None, 2]], "c": {"d": None}, "e": "NaN"}


# -- end to end --------------------------------------------------------------------------------------


def strict(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: bare {constant}")

    return json.loads(text, parse_constant=refuse)



def scrape(p: Process) -> Series:
    return scrape_series(p, "chat")


def one(series: Series, name: str, **labels: str) -> float | None:
    found = [v for (n, lab), v in series.items() if n == name and set(labels.items()) <= set(lab)]
    assert len(found) <= 1, (name, found)
    return found[0] if found else None


def every_json(p: Process) -> dict[str, Any]:
    """Every JSON endpoint, read with a parser that refuses NaN and Infinity."""
    out = {}
    for path in ("/api/v1/gpus", "/api/v1/rightsizing", "/api/v1/patches", "/api/v1/queues", "/api/v1/pods"):
        status, _, body = http_get(p.url + path)
        assert status == 200, (path, status, body[:200])
        out[path] = strict(body.decode())
    return out


def after_polls(p: Process, now: dict[str, Any], check: Callable[[Series], None], n: int = 3) -> Series:
    """What the exporter says once ``n`` more polls were taken, once it passes ``check`` (asked
    again at each poll for up to 20 s). Every answer on the way is strict JSON, and a negative or
    non-finite value of the workload at any moment fails the test."""
    start = now["polls"]
    wait_for(lambda: now["polls"] >= start + n, 20, what=f"{n} polls")

    def answer() -> Series:
        at = now["polls"]
        s = scrape(p)
        ours = {name: v for (name, _), v in s.items() if name.startswith("rightsizer_workload_")}
        now["bad"].update({name: v for name, v in ours.items() if not 0 <= v < math.inf})
        assert not now["bad"], now["bad"]
        every_json(p)
        try:
            check(s)
        except AssertionError:
            wait_for(lambda: now["polls"] > at, 10, what="the next poll")
            raise
        return s

    return wait_for(answer, 20, what="the expected answer")


@pytest.fixture
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Process, dict[str, Any]]]:
    layout = getattr(request, "param", GOOD)
    zero = [(le, "0") for le, _ in layout]  # the baseline: nothing observed yet
    now: dict[str, Any] = {"polls": 0, "page": page(zero, total="0"), "bad": {}}
    with FakeHttpServer() as http:

        def body() -> bytes:
            now["polls"] += 1
            return str(now["page"]).encode()

        http.route("/vllm", body=body)
        config = {
            "queues": [{"name": "chat", "kind": "vllm", "url": http.url("/vllm"), "backoff_max": 1,
                        "labels": {"namespace": "llm", "workload": "chat"}}],
            "slos": [{"namespace": "llm", "workload": "chat", "ttft_seconds": 0.5}],
        }  # fmt: skip
        path = tmp_path / "exporter.yaml"
        path.write_text(yaml.safe_dump(config))
        with exporter(["--simulate", "--interval", "0.2", "--config", str(path)]) as p:
            wait_for(lambda: one(scrape(p), "rightsizer_queue_source_up") == 1, 20, what="chat polled")
            yield p, now


def test_garbage_is_refused_with_its_reason_and_the_next_good_page_recovers(
    served: tuple[Process, dict[str, Any]],
) -> None:
    p, now = served
    up, unjudged = "rightsizer_workload_slo_scaling_up", "rightsizer_workload_slo_scaling_unjudged_info"
    ratio, requests = (
        "rightsizer_workload_slo_scaling_latency_ratio",
        "rightsizer_workload_slo_requests_total",
    )
    # 200 requests since the baseline: p95 (rank 190) in (0.75, 1.0] holding 150..200:
    # 0.75 + 0.25 x 40 / 50 = 0.95 s against 0.5 s: ratio 1.9.
    now["page"] = page(GOOD)
    wait_for(lambda: one(scrape(p), up) == 1, 20, what="chat judged")
    s = scrape(p)
    assert one(s, ratio) == pytest.approx(1.9) and one(s, requests) == 200
    assert one(s, unjudged) is None

    def refused(why: str) -> Callable[[Series], None]:
        return lambda s: refused_for(s, why)

    def refused_for(s: Series, why: str) -> None:
        assert one(s, up) == 0 and one(s, ratio) is None  # cannot be judged: present, 0, never a value
        assert one(s, unjudged, reason=f"invalid histogram: {TTFT}: {why}") == 1
        assert one(s, requests) == 200  # nothing of the garbage counted
        chat = next(x for x in every_json(p)["/api/v1/rightsizing"]["rightsizing"]["slos"]
                    if x["workload"] == "chat")  # fmt: skip
        assert chat["scaling"]["why_not"] == f"invalid histogram: {TTFT}: {why}"
        assert chat["invalid_histograms"] == {"ttft": f"{TTFT}: {why}"}
        assert f"invalid histogram: {TTFT}: {why}" in http_get(p.url + "/")[2].decode()  # the status page

    # vLLM with negative bounds: every request at or under -1 s, which read as a ratio of -2.
    now["page"] = page([("-1.0", "400"), ("-0.5", "400"), ("+Inf", "400")], total="0")
    after_polls(p, now, refused("an le bound is negative"))

    # two engines with counts near the largest float: their sum overflows to +Inf (the counters
    # turned NaN or +Inf, and stayed so for the right-sizing window)
    near = swap(swap(GOOD, 4, n="1.7e308"), 5, n="1.7e308")
    second = page(near, count="1.7e308", labels='engine="1",model_name="m"')
    now["page"] = page(near, count="1.7e308") + second.split("\n", 1)[1]
    after_polls(p, now, refused("a bucket count is over 2^53"))

    # the next good page: 100 more requests at 0.2 s since the last good one (150 + 100 = 250
    # under 0.5 s of 300, p95 = rank 285 in (0.75, 1.0]: 0.75 + 0.25 x 35 / 50 = 0.925 s: 1.85)
    now["page"] = page(swap(swap(swap(swap(GOOD, 1, n="250"), 2, n="250"), 3, n="250"), 4, n="300"),
                       total="95.0", count="300")  # fmt: skip
    now["page"] = now["page"].replace('le="+Inf"} 200', 'le="+Inf"} 300')

    def judged_again(s: Series) -> None:
        assert one(s, up) == 1 and one(s, unjudged) is None  # judged again on the next good page
        assert one(s, ratio) == pytest.approx(1.85) and one(s, requests) == 300

    after_polls(p, now, judged_again)
    assert "Traceback" not in p.log()


def test_a_layout_changing_every_poll_counts_each_request_once(
    served: tuple[Process, dict[str, Any]],
) -> None:
    """The last finite bound alternates between 1.0 and 2.0 s while nothing new is observed: no
    request is counted again (the layouts compare on the bounds they share; counting them as
    restarts added the 200 requests again at every change)."""
    p, now = served
    now["page"] = page(GOOD)
    wait_for(lambda: one(scrape(p), "rightsizer_workload_slo_requests_total") == 200, 20, what="200 requests")
    layouts = (page(swap(GOOD, 4, le="2.0")), page(GOOD))
    for k in range(6):
        now["page"] = layouts[k % 2]
        polled = now["polls"]
        wait_for(lambda polled=polled: now["polls"] >= polled + 2, 10, what="two polls of the layout")
    s = scrape(p)
    assert one(s, "rightsizer_workload_slo_requests_total") == 200
    assert one(s, "rightsizer_workload_slo_scaling_up") == 1


@pytest.mark.parametrize("served", [[("-1.0", "0"), ("-0.5", "0"), ("+Inf", "0")]], indirect=True)
def test_a_server_publishing_negative_bounds_is_never_judged(served: tuple[Process, dict[str, Any]]) -> None:
    """vLLM publishing negative bounds from its start: 200 requests, every one at or under -1 s by
    its count, read as p95 = -1 s, a ratio of -2 against the 0.5 s target. Refused instead."""
    p, now = served
    now["page"] = page([("-1.0", "200"), ("-0.5", "200"), ("+Inf", "200")], total="0")
    why = f"invalid histogram: {TTFT}: an le bound is negative"

    def refused(s: Series) -> None:
        assert one(s, "rightsizer_workload_slo_scaling_up") == 0
        assert one(s, "rightsizer_workload_slo_scaling_unjudged_info", reason=why) == 1
        assert one(s, "rightsizer_workload_slo_window_latency_ratio") is None
        assert one(s, "rightsizer_workload_slo_scaling_latency_ratio") is None

    after_polls(p, now, refused)


def test_counts_that_overflow_when_summed_never_reach_the_counters_or_the_json(
    served: tuple[Process, dict[str, Any]],
) -> None:
    """Two engines at 1.7e308 each: their sum is +Inf, which made the ratio NaN (a bare NaN in
    /api/v1/rightsizing) and the counters +Inf for the whole right-sizing window. Refused instead,
    and the next good page is judged at once."""
    p, now = served
    near = swap(swap(GOOD, 4, n="1.7e308"), 5, n="1.7e308")
    second = page(near, count="1.7e308", labels='engine="1",model_name="m"')
    now["page"] = page(near, count="1.7e308") + second.split("\n", 1)[1]
    why = f"invalid histogram: {TTFT}: a bucket count is over 2^53"

    def refused(s: Series) -> None:
        assert one(s, "rightsizer_workload_slo_scaling_unjudged_info", reason=why) == 1
        assert (one(s, "rightsizer_workload_slo_requests_total") or 0) == 0  # nothing counted yet

    after_polls(p, now, refused)
    now["page"] = page(GOOD)  # 200 requests since the baseline: ratio 1.9 (as above)

    def judged(s: Series) -> None:
        assert one(s, "rightsizer_workload_slo_scaling_latency_ratio") == pytest.approx(1.9)
        assert one(s, "rightsizer_workload_slo_requests_total") == 200

    after_polls(p, now, judged)
