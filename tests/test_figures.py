"""rightsizing.figures: the short forms the status page and reports use, checked on hand-worked
values (a figure with false precision or a six-digit percentage is what they exist to prevent)."""

from __future__ import annotations

import pytest

from rightsizing.figures import latency, missed_by, monthly


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(0.82, "820 ms"), (4.1, "4.10 s"), (59.994, "59.99 s"), (2006.5, "33.4 min"), (60.0, "1.00 min"),
     (9000.0, "2.50 h"), (None, "n/a"), (float("inf"), "n/a")],
)  # fmt: skip
def test_latency_in_the_unit_that_keeps_it_short(seconds: float | None, said: str) -> None:
    assert latency(seconds) == said


@pytest.mark.parametrize(
    ("ratio", "said"),
    [(1.64, "missed by 64%"), (4.0, "missed: 4.0x the target"), (4013.0, "missed: >100x the target"),
     (float("inf"), "missed: >100x the target")],
)  # fmt: skip
def test_missed_by_is_capped(ratio: float, said: str) -> None:
    assert missed_by(ratio) == said


@pytest.mark.parametrize(
    ("dollars", "said"),
    [(24969.07, "$25,000"), (1234.5, "$1,230"), (87.61, "$87.6"), (0.41234, "$0.412"), (0.0, "$0"),
     (-24969.07, "-$25,000")],
)  # fmt: skip
def test_monthly_money_to_three_significant_digits(dollars: float, said: str) -> None:
    assert monthly(dollars) == said
