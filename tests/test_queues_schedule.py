"""Poll scheduling: polls fire just before the sampler renders, on the render grid, and back off."""

from __future__ import annotations

import pytest

from exporter.sources.queues.poller import Poller
from exporter.sources.queues.schedule import BurstLead, Lead, RenderClock, next_fire
from exporter.sources.queues.settings import QueueSettings
from rightsizer_core.settings import build


def test_render_clock_projects_the_earliest_recent_render() -> None:
    clock = RenderClock(1.0)
    assert clock.next_render(5.0) == 5.0  # nothing seen yet: no grid to align to
    clock.observe(10.00)
    clock.observe(11.03)  # a render delayed by a slow GPU read must not delay the grid
    assert clock.next_render(11.5) == pytest.approx(12.0)
    assert clock.next_render(12.0) == pytest.approx(12.0)
    assert clock.next_render(12.01) == pytest.approx(13.0)


def test_polls_fire_lead_seconds_before_each_render() -> None:
    clock = RenderClock(1.0)
    assert next_fire(clock, 0.05, now=3.0, last_fire=None, wait=1.0) == 3.0  # first poll: at once
    clock.observe(10.0)
    fire = next_fire(clock, 0.05, now=10.001, last_fire=9.95, wait=1.0)
    assert fire == pytest.approx(10.95)
    # every third render for an interval of three renders
    assert next_fire(clock, 0.05, now=10.001, last_fire=9.95, wait=3.0) == pytest.approx(12.95)
    # a poll that overran its slot goes to the next render it can still make
    assert next_fire(clock, 0.05, now=10.97, last_fire=9.95, wait=1.0) == pytest.approx(11.95)


def test_lead_follows_recent_poll_durations_in_whole_steps_within_bounds() -> None:
    lead = Lead(1.0)
    assert lead.seconds == pytest.approx(0.020)  # one step before any poll
    lead.record(0.004)
    assert lead.seconds == pytest.approx(0.020)  # 4 ms + 10 ms margin, rounded up to 20 ms
    lead.record(0.043)
    assert lead.seconds == pytest.approx(0.060)  # the slowest recent poll counts
    for _ in range(8):
        lead.record(0.001)
    assert lead.seconds == pytest.approx(0.020)  # ... for the last 8 polls only
    lead.record(2.0)
    assert lead.seconds == 0.25  # a quarter of the render interval at most


def test_the_burst_lead_covers_the_slowest_of_the_last_eight_bursts() -> None:
    burst = BurstLead(1.0)
    assert burst.seconds == pytest.approx(0.020)
    for end in (0.004, 0.021, 0.009):  # three members of the burst fired at t=100
        burst.completed(100.0, 100.0 + end)
    burst.completed(100.0 + 1e-12, 100.030)  # the same burst, as another member computed its time
    assert burst.seconds == pytest.approx(0.060)  # 1.25 x 30 ms + 10 ms, rounded up to 20 ms steps
    for i in range(1, 8):  # seven quicker bursts: the slow one is still remembered
        burst.completed(100.0 + i, 100.0 + i + 0.002)
    assert burst.seconds == pytest.approx(0.060)
    burst.completed(108.0, 108.002)  # the eighth pushes it out
    assert burst.seconds == pytest.approx(0.020)
    burst.completed(109.0, 109.9)
    assert burst.seconds == 0.25  # capped at a quarter of the interval


def test_failures_back_off_doubling_up_to_backoff_max() -> None:
    cfg = build(QueueSettings, {"name": "q", "kind": "tgi", "url": "http://x/metrics", "backoff_max": 5}, "q")
    poller = Poller(cfg, lambda: None, RenderClock(0.5), multiple=2, timeout=1.0)  # type: ignore[arg-type,return-value]
    waits = []
    for failures in range(7):
        poller._failures = failures
        waits.append(poller.wait)
    assert waits == [1.0, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]


@pytest.mark.parametrize(
    ("interval", "multiple"), [(None, 1), (0.05, 1), (1.0, 1), (1.4, 1), (2.6, 3), (30, 30)]
)
def test_intervals_round_to_whole_renders(interval: float | None, multiple: int) -> None:
    cfg = build(QueueSettings, {"name": "q", "kind": "tgi", "url": "http://x/m", "interval": interval}, "q")
    assert cfg.interval_multiple(1.0) == multiple
    assert cfg.effective_timeout(1.0) == min(max(multiple, 1.0), 10.0)
