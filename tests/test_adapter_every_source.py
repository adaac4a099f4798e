"""Keys several exporters publish parts of (``every_source``: the SLO rules) against keys that
exporters publish copies of (the queues): which source states make a key unanswerable."""

from __future__ import annotations

import pytest

from adapter.kubernetes.availability import unsound
from adapter.rules import BUILTIN_RULES
from adapter.sources import DOWN, GONE, STALE, TAINTED, UP, state
from adapter.sources.evidence import Horizon, Target, classify, unreached
from adapter.vectors import Series

KEY = {"namespace": "ha", "workload": "w"}


def gone(s: Series) -> Series:
    return Series({**s.labels, GONE: "1"}, s.value)


CASES = [  # (states of one key, unsound with every_source, unsound without)
    ([state(KEY, "a", UP), state(KEY, "b", UP)], False, False),
    ([state(KEY, "a", UP), state(KEY, "b", STALE, "b: its last scrape failed (up 0)")], True, False),
    ([state(KEY, "a", UP), state(KEY, "b", DOWN, "scaling_up is 0")], True, False),
    ([state(KEY, "a", UP), state(KEY, "b", TAINTED, "b is frozen")], True, True),
    ([state(KEY, "a", UP), gone(state(KEY, "b", STALE, "b: no longer scraped"))], False, False),  # rollout
    ([gone(state(KEY, "b", STALE, "b: no longer scraped"))], True, True),  # nobody took over
]


@pytest.mark.parametrize(("states", "every", "copies"), CASES)
def test_which_states_make_a_key_unsound(states: list[Series], every: bool, copies: bool) -> None:
    assert bool(unsound(states, every=True)) is every
    assert bool(unsound(states, every=False)) is copies


def test_the_slo_rules_need_every_source_and_the_others_do_not() -> None:
    every = {r.name for r in BUILTIN_RULES if r.every_source}
    assert every == {"rightsizer_workload_slo_latency_ratio", "rightsizer_workload_slo_attainment_ratio"}


def test_a_target_gone_or_done_with_the_key_is_marked_gone_a_failing_one_is_not() -> None:
    """Left service discovery (gone), up but no longer publishing the workload's flag (done: its
    replica moved away), failing its scrapes (down): only the last holds its part."""
    rule = next(r for r in BUILTIN_RULES if r.name == "rightsizer_workload_slo_latency_ratio")
    horizon = Horizon(3600, 60)
    seen = [Series({**KEY, "instance": i, "job": "e"}, 990.0) for i in ("gone:1", "done:1", "down:1")]
    known = {
        ("gone:1", "e"): Target(healthy_at=990.0),
        ("done:1", "e"): Target(1.0, 999.0, 999.0),
        ("down:1", "e"): Target(0.0, 1000.0, 990.0),
    }
    found = {s.labels["@source"]: s for s in classify(rule, {"seen": seen}, known, 1000.0, horizon)}
    for source, marked in (("gone:1", True), ("done:1", True), ("down:1", False)):
        assert found[f"{source} (job e)"].value == STALE
        assert (GONE in found[f"{source} (job e)"].labels) is marked, source


def test_a_target_never_reached_is_unknown_only_in_an_exporter_job() -> None:
    """Prometheus mode: a failing target never healthy within the horizon that published nothing
    might hold anything, in a job of exporters; in a catch-all job (a target answering without
    the exporter's stamp) it is just some failing pod."""
    rule = next(r for r in BUILTIN_RULES if r.name == "rightsizer_workload_slo_latency_ratio")
    horizon = Horizon(3600, 60)
    scraped = [Series({"job": "e"}, 120.0)]
    parts = {"cur": [Series({**KEY, "instance": "a:1", "job": "e"}, 1.0)], "scrapes": scraped}
    never = Target(0.0, 1000.0, None)
    exporters = {("a:1", "e"): Target(1.0, 1000.0, 990.0, stamped=True), ("b:1", "e"): never}
    [unknown] = unreached(rule, parts, exporters, horizon)
    assert "b:1 (job e) has not been scraped successfully" in unknown.labels["@unknown"]
    catch_all = {**exporters, ("web:80", "e"): Target(1.0, 1000.0, 990.0, stamped=False)}
    assert unreached(rule, parts, catch_all, horizon) == []
    other_job = {("a:1", "e"): exporters[("a:1", "e")], ("b:1", "other"): never}
    assert unreached(rule, parts, other_job, horizon) == []


def test_a_job_the_engine_began_scraping_moments_ago_is_unknown() -> None:
    """A target not scraped yet has no `up` at all: until the job has been scraped a few times,
    the exporters answering might not be all of them."""
    rule = next(r for r in BUILTIN_RULES if r.name == "rightsizer_workload_slo_latency_ratio")
    known = {("a:1", "e"): Target(1.0, 1000.0, None, stamped=True)}
    cur = [Series({**KEY, "instance": "a:1", "job": "e"}, 1.0)]
    for count, unknown in ((None, True), (1.0, True), (2.0, True), (3.0, False)):
        scrapes = [] if count is None else [Series({"job": "e"}, count)]
        found = unreached(rule, {"cur": cur, "scrapes": scrapes}, known, Horizon(3600, 60))
        assert bool(found) is unknown, count
        if found:
            assert "the engine has scraped job e only" in found[0].labels["@unknown"]
    stamp_only = {("", ""): Target(stamped=True), ("a:1", "e"): Target(stamped=True)}  # no `up`
    imported = unreached(rule, {"cur": cur, "scrapes": []}, stamp_only, Horizon(3600, 60))
    assert imported == []  # no `up` for the job at all: imported or remote-written data
