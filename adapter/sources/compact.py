"""A query answer in the engines' own compact shape, read straight into series (``parse_answer``).

Prometheus and VictoriaMetrics write every series of a vector answer as
``{"metric":{...},"value":[<time>,"<value>"]}``, joined by commas with no spaces. At 40,000 GPUs a
refresh reads some 100,000 such series, almost all of label sets read the refresh before
(``prometheus.SeenTexts``). Reading them in three passes (``vectorjson.decode`` matching each with a
pattern and handing its texts over, then counting the series per source-state part, then making
each a ``Series``) was about half of a refresh's CPU, which a replica shares with the event loop
answering requests. ``read`` does it in one pass of short calls: the pieces of a series cut with
``str.find``, its label set looked up by its text's hash, its value converted and kept; reading
the answers costs about 30 % less (``bench/adapter_parse.py``; docs/fleet-scale.md, "Compact
answers read in one pass").

It gives the same outcome as decoding the whole body with ``json.loads``, or gives up (None) and
the caller reads the answer the usual way, which decides the outcome (a value or the error):

- a series' ``metric`` object ends at the first ``},"value":[`` after it begins: in valid JSON that
  text cannot lie inside a string (a quote in a string is escaped), whatever the labels hold; a
  wrong cut (a hostile body) is a proper prefix of an object, which is no JSON, and a text not read
  before is decoded (``miss``), which fails on it;
- the time text must be JSON's grammar for a number; the value text one ``float`` reads and JSON
  allows in a string unescaped: ``float`` refuses quotes and backslashes and takes whitespace only at
  either end, so a control character can only be there, and is refused;
- a series is followed by a comma and the next, or by the array's ``]``.

So when it returns, the array is exactly these series joined by commas, and ``json.loads`` would
read the same ones. Each step is a short call, so the interpreter can switch threads between series.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ..giveway import EVERY, give_way
from ..labelsets import Labels
from ..vectors import Series
from .source_states import MARKER

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")  # JSON's number
_PLAIN = re.compile(r'[^"\\\x00-\x1f]*')  # a string's text that needs no unescaping
# What ``prometheus._fast_sample`` gives for a series' (metric, time, value) texts not read before:
# (labels, time text, value text), or anything else for a series ``parse_answer`` refuses
Miss = Callable[[str, str, str], Any]
Read = tuple[list[Series], float, list[Series], dict[str, int]]


def read(
    text: str, at: int, now: dict[int, Any], before: dict[int, Any], miss: Miss, states: bool
) -> tuple[Read, int] | None:
    """(the finite series, the latest time, the NaN/Inf series, the count of series per source-state
    marker, "" for none, counted only with ``states``) of the array whose first series begins at
    ``at``, and the index just past its ``]``; None where any series is not of the compact shape
    or not what decoding it would give.

    ``now`` and ``before``: a ``SeenTexts``'s tables. An entry read from ``before`` is kept in
    ``now``, as ``miss`` keeps what it decodes. An entry is a shared label set, whose value is the
    sample's, or (the label set, the text of the label holding its value: ``values_label``), whose
    sample's value text is only checked."""
    # (labels, value) as read; the Series made once all are read, one after the other: made between
    # the texts of each series, they cost the stages reading them next (``split_parts``, the
    # indexes) a quarter more CPU at 40,000 GPUs (bench/adapter_parse.py)
    finite: list[tuple[Labels, float]] = []
    refused: list[tuple[Labels, float]] = []
    counts: dict[str, int] = {}
    find, starts = text.find, text.startswith
    number, plain = _NUMBER.fullmatch, _PLAIN.fullmatch
    now_get, before_get = now.get, before.get
    last = None  # the time text last checked: every series of an answer has the same
    stamp = 0.0
    seen = 0  # series read so far
    while True:
        seen += 1
        if not seen % EVERY:
            give_way()
        if not starts('{"metric":{', at):
            return None
        cut = find('},"value":[', at + 10)
        comma = find(',"', cut + 11) if cut >= 0 else -1
        end = find('"]}', comma + 2) if comma >= 0 else -1
        if end < 0:
            return None
        ts = text[cut + 11 : comma]
        if ts != last:
            if number(ts) is None:
                return None
            last = ts
            stamp = max(stamp, float(ts))
        value = text[comma + 2 : end]
        metric = text[at + 10 : cut + 1]
        key = hash(metric)
        got = now_get(key)
        if got is None:
            got = before_get(key)
            if got is None:
                try:
                    out = miss(metric, ts, value)
                except ValueError:  # not JSON: a wrong cut, or a body json.loads refuses
                    return None
                got = now_get(key) if type(out) is tuple else None
                if got is None:
                    return None  # not a series: refused the usual way
            else:
                now[key] = got
        try:
            if type(got) is Labels:
                labels = got
                number_of = float(value)
                if value[0] < " " or value[-1] < " ":
                    return None  # a control character float took as whitespace: no JSON string holds it
            else:
                labels, label_text = got
                if plain(value) is None:
                    return None
                number_of = float(label_text)
        except ValueError:
            return None
        (finite if number_of - number_of == 0 else refused).append((labels, number_of))
        if states:
            mark = labels.get(MARKER, "")
            counts[mark] = counts.get(mark, 0) + 1
        at = end + 3
        if starts(",", at):
            at += 1
        elif starts("]", at):
            series = [Series(labels, number_of) for labels, number_of in finite]
            dropped = [Series(labels, number_of) for labels, number_of in refused]
            return (series, stamp, dropped, counts), at + 1
        else:
            return None
