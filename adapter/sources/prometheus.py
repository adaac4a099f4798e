"""Prometheus mode: one instant query per rule per refresh against the Prometheus query API.

Works with anything that speaks ``/api/v1/query`` (Prometheus, Thanos Query, Mimir's
``/prometheus`` prefix, VictoriaMetrics). Queries are POSTed (long templates fit), each with a
deadline, evaluated at the engine's own clock (no ``time`` is sent, so an adapter clock behind the
engine's cannot ask for old values); NaN and infinite samples are never passed on: the key they
belong to is refused (503 naming them), or the whole rule when it has no source states. A
partial answer (Thanos ``warnings``, VictoriaMetrics cluster ``isPartial``) is refused like an
error, and complete answers are asked for where the engine has the switch. A rule with a source
family also learns which exporters its values come from and whether each is up and current
(``evidence.py``), inside the rules' own queries (``source_states.py``): still one query per rule
per refresh, or one for a flag rule and its complement together (``flagpairs.py``).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import logging
import math
import os
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import aiohttp

from rightsizer_core.files import checked_path, read_secret, read_token
from rightsizer_core.httpauth import auth_refusal, describe_credentials
from rightsizer_core.logs import event

from .. import labelsets
from ..config import PrometheusSettings
from ..labelsets import Labels, intern
from ..promql import render
from ..rules import RuleConfig
from ..selfmetrics import AdapterMetrics
from ..vectors import Series, with_workload
from . import TAINTED, UNKNOWN, RuleResult, refuse_non_finite
from .compact import read as read_compact
from .evidence import (
    DOWN_NOW,
    Evidence,
    Horizon,
    Target,
    classify,
    failed_since,
    foreign_jobs,
    late_parts,
    read_evidence,
    rule_parts,
    target_parts,
    unreached,
    up_from_values,
)
from .flagpairs import FLAG_VALUES, FlagPair, extremes, flag_pairs, in_thread_if_large
from .source_states import MARKER, SharedEvidence, parts_only, split_parts, with_parts
from .vectorjson import compact, decode

log = logging.getLogger("rightsizer.adapter.prometheus")
# Queries of a refresh at the engine at once: a refresh's work is the same either way, but more at
# once only share the engine's cores (two replicas, and the engine's own scraping), each running
# longer, until all of them pass their deadline together (measured at 40,000 GPUs: see
# docs/fleet-scale.md). Two at a time keep each query's time its own, within its deadline.
MAX_CONCURRENT_QUERIES = 2
MAX_REFRESH_SHARE = 0.5  # of a replica's time spent refreshing, at most (``next_delay``)...
FRESH_REFRESH_SHARE = 0.6  # ...unless answers would pass twice the interval, up to this share
CONNECTIONS = 8  # to the engine: a refresh's queries, and prometheus-adapter rules asked per request
THREAD_BYTES = 256 * 1024  # answers at least this large are decoded in a worker thread (vectorjson.py)


Answer = tuple[list[Series], float, list[Series]]  # series, evaluation time, NaN/Inf samples left out
T = TypeVar("T")


def _same(answer: Answer) -> Answer:
    return answer


class QueryError(Exception):
    """A query that gave no usable answer; the message is one line for logs and Status bodies."""


class QueryTimeout(QueryError):
    """A query that ran past its deadline (counted apart in the adapter's own metrics)."""


def ssl_context(cfg: PrometheusSettings) -> ssl.SSLContext | bool:
    if not cfg.url or not cfg.url.startswith("https://"):
        return True
    try:
        ctx = ssl.create_default_context(cafile=checked_path(cfg.ca_file) if cfg.ca_file else None)
        if cfg.insecure_skip_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if cfg.cert_file and cfg.key_file:
            ctx.load_cert_chain(checked_path(cfg.cert_file), checked_path(cfg.key_file))
    except (OSError, ssl.SSLError) as exc:  # one line at start (the caller says so and exits)
        name = f"{exc.filename}: " if isinstance(exc, OSError) and exc.filename else ""
        raise ValueError(f"cannot load Prometheus TLS files: {name}{exc.strerror or exc}") from None
    return ctx


def _read_secret(path: str, what: str, token: bool = False) -> str:
    try:
        value = read_token(path) if token else read_secret(path)
    except OSError as exc:
        raise QueryError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if token and not value:
        raise QueryError(f"{what} {path} is empty")
    return value


def partial(data: dict[str, Any]) -> str:
    """Why a successful answer may be missing series ("" when complete): a warning (Thanos Query
    answering without an unavailable store, Prometheus or Mimir/Cortex when part of the data could
    not be read), or VictoriaMetrics cluster's ``isPartial`` (a vmstorage node did not answer)."""
    if data.get("isPartial") is True:
        return "isPartial is true (a storage node did not answer)"
    warnings = data.get("warnings")
    if isinstance(warnings, list) and warnings:
        more = f" (and {len(warnings) - 1} more)" if len(warnings) > 1 else ""
        return f"warning: {str(warnings[0])[:200]}{more}"
    if warnings:  # not a list: not a shape any engine sends, so not trusted either
        return "the answer carries warnings"
    return ""


Derive = Callable[[dict[str, str]], dict[str, str]]  # a rule's labels derived from others (a new dict)


def _sample(item: Any, derive: Derive | None = None, values_label: str | None = None) -> Any:
    """A decoded series as (labels, time, value text) as soon as it is read (``vectorjson``), its
    labels without ``__name__``, every value a string, interned (``labelsets``) unless they carry a
    source-state marker, after ``derive`` (a rule's ``workload`` from its ``pod``); anything of
    another shape is left as it is, for ``parse_answer`` to refuse. With ``values_label`` (a
    ``count_values`` answer, ``FLAG_VALUES``) a value's text is that label's, taken out of its
    labels; its sample (how many series held the value) is not used."""
    if type(item) is not dict:
        return item
    labels, pair = item.get("metric"), item.get("value")
    if type(labels) is not dict or type(pair) is not list or len(pair) != 2:
        return item
    labels.pop("__name__", None)
    try:
        "".join(labels.values())  # every value a string (keys always are), checked in C
    except TypeError:
        labels = {str(k): str(v) for k, v in labels.items()}
    if MARKER in labels:
        return labels, pair[0], pair[1]
    text = pair[1]
    if values_label is not None:
        text = labels.pop(values_label, None)
        if text is None:
            return item
    # shared with every rule and refresh holding it (labelsets.py)
    return intern(labels if derive is None else derive(labels)), pair[0], text


class SeenTexts:
    """What ``_sample`` made of each series' label set, by the text of its ``metric`` object.

    A refresh reads the same label sets as the last: every GPU's, every queue's, every scrape
    target's in the evidence and the source-state parts. Decoding each again, then finding its
    shared set (``labelsets.intern`` hashes every pair), was most of what reading an answer cost:
    at 40,000 GPUs, with the table, a refresh of the two rules the fleet bench asks took the
    adapter 1.4 to 2.0 s of CPU instead of 2.1 to 3.2 s, every rule's 3.2 to 3.6 instead of 3.9
    to 5.0 (``bench/adapter_parse.py``, with and without ``--cold``).

    Keyed by the text's hash, so that the table holds no copy of the texts (about 100,000 label
    sets at 40,000 GPUs): Python's 64-bit string hash, SipHash keyed anew by each process, so label
    values cannot be chosen to collide (where ``PYTHONHASHSEED`` fixes the key, the table is not
    used: ``HASH_KEYED``). A collision by chance between two of the label sets read within two
    refreshes is less likely than 1 in 10^9.
    One table per conversion (a rule's ``derive`` and ``values_label``). Bounded: ``rotate`` (at
    every sweep of the label sets, after each refresh) forgets what was not read since the
    rotation before.

    An entry is a shared ``Labels``, or (labels, the value label's text) where the series names its
    value in a label (``values_label``). A source-state part's series, with its marker, is a
    shared ``Labels`` too (not derived; ``split_parts`` copies it without the marker)."""

    def __init__(self) -> None:
        self.now: dict[int, Any] = {}
        self.before: dict[int, Any] = {}

    def rotate(self) -> None:
        self.before, self.now = self.now, {}


_SEEN: dict[tuple[Derive | None, str | None], SeenTexts] = {}
# string hashes keyed at random by this process: a fixed PYTHONHASHSEED would let label values be
# chosen to collide in ``SeenTexts``, which is then not used (every series decoded)
HASH_KEYED = os.environ.get("PYTHONHASHSEED", "random") == "random"


def _rotate_seen() -> None:
    for seen in list(_SEEN.values()):
        seen.rotate()


labelsets.on_sweep(_rotate_seen)


def _fast_sample(
    metric: str, ts: str, value: str, derive: Derive | None, values_label: str | None, seen: SeenTexts
) -> Any:
    """What ``_sample`` gives for ``{"metric":<metric>,"value":[<ts>,"<value>"]}`` (``vectorjson``'s
    ``fast``), ``metric`` decoded only where its text was not read in this refresh or the last.
    The time is kept as its text (``parse_answer`` reads it with ``float``)."""
    key = hash(metric)
    got = seen.now.get(key)
    if got is None:
        got = seen.before.get(key)
        if got is None:
            item = {"metric": json.loads(metric), "value": [ts, value]}  # the time is passed as it is
            out = _sample(item, derive, values_label)
            if type(out) is not tuple:
                return out  # not a series: refused by parse_answer, as it would be decoded whole
            labels, _, text = out
            if type(labels) is not Labels:  # a source-state part's series: shared all the same
                labels = intern(labels)
                text = None
            got = labels if values_label is None or text is None else (labels, text)
        seen.now[key] = got
    if type(got) is Labels:
        return got, ts, value
    labels, text = got
    return labels, ts, text


def parse_answer(
    status: int,
    body: bytes,
    limit: int,
    states: bool = False,
    derive: Derive | None = None,
    values_label: str | None = None,
) -> Answer:
    """(series, evaluation time, NaN/Inf samples left out) from a query API answer. With ``states``
    (a query carrying source states) ``limit`` bounds the values and the states each; ``derive``
    adds the labels a rule derives to each of its values, ``values_label`` names the label holding
    each value (``_sample``)."""
    sample: Callable[[Any], Any] = _sample
    if derive is not None or values_label is not None:
        sample = functools.partial(_sample, derive=derive, values_label=values_label)
    fast = None
    if HASH_KEYED:
        seen = _SEEN.get((derive, values_label))
        if seen is None:
            seen = _SEEN.setdefault((derive, values_label), SeenTexts())
        fast = functools.partial(_fast_sample, derive=derive, values_label=values_label, seen=seen)
        if status == 200:  # the engines' compact series read in one pass, or decoded below
            whole = compact(body, functools.partial(read_compact, now=seen.now, before=seen.before, miss=fast,
                                                    states=states))  # fmt: skip
            if whole is not None:
                return _checked(whole[0], *whole[1], limit)
    try:
        data = decode(body, sample, fast)
    except ValueError:
        raise QueryError(f"prometheus answered HTTP {status} with a body that is not JSON") from None
    if not isinstance(data, dict):
        raise QueryError("prometheus answered JSON that is not an object")
    if status != 200 or data.get("status") != "success":
        why = f"{data.get('errorType', 'error')}: {data.get('error', 'no reason given')}"
        # the engine's own deadline (the query's ``timeout``): Prometheus says errorType timeout,
        # VictoriaMetrics a 503 whose error names the timeout
        late = data.get("errorType") == "timeout" or (status == 503 and "timeout" in str(data.get("error")))
        raise (QueryTimeout if late else QueryError)(f"prometheus answered HTTP {status}: {why}"[:300])
    partial_why = partial(data)
    if partial_why:
        raise QueryError(f"the answer is partial, so it is not used: {partial_why}"[:300])
    result = data.get("data") or {}
    if not isinstance(result, dict):
        raise QueryError("prometheus answered JSON whose data is not an object")
    kind, items = result.get("resultType"), result.get("result")
    if kind == "scalar" and isinstance(items, list) and len(items) == 2:
        items = [{"metric": {}, "value": items}]
    elif kind != "vector" or not isinstance(items, list):
        raise QueryError(f"the query must give an instant vector or a scalar; it gave {kind!r}")
    counts: dict[str, int] = {}
    for i in items:
        mark = ""
        if states and type(i) is tuple:
            mark = i[0].get(MARKER, "")
        elif states and isinstance(i, dict):
            mark = (i.get("metric") or {}).get(MARKER, "")
        counts[mark] = counts.get(mark, 0) + 1
    _within(counts, limit)
    series: list[Series] = []
    dropped: list[Series] = []
    stamp = 0.0
    try:
        for item in items:
            if type(item) is not tuple:  # decoded whole (json.loads): not converted yet
                item = sample(item)
                if type(item) is not tuple:
                    raise TypeError
            labels, ts, text = item
            value = float(text)
            stamp = max(stamp, float(ts))
            (series if math.isfinite(value) else dropped).append(Series(labels, value))
    except (KeyError, TypeError, ValueError):
        raise QueryError("prometheus answered a vector whose samples are malformed") from None
    return series, stamp or time.time(), dropped


def _checked(
    data: dict[str, Any], series: list[Series], stamp: float, dropped: list[Series], counts: dict[str, int],
    limit: int,
) -> Answer:
    """``compact``'s answer, refused as ``parse_answer`` refuses a decoded one: partial, or more
    series of the values or of a source-state part than ``limit``."""
    partial_why = partial(data)
    if partial_why:
        raise QueryError(f"the answer is partial, so it is not used: {partial_why}"[:300])
    _within(counts, limit)
    return series, stamp or time.time(), dropped


def _within(counts: dict[str, int], limit: int) -> None:
    for mark, count in counts.items():
        if count > limit:
            what = f"series of source-state part {mark}" if mark else "series"
            raise QueryError(f"the query gave {count} {what}, more than max_series_per_rule ({limit})")


class PrometheusSource:
    name = "prometheus"

    def __init__(self, cfg: PrometheusSettings, metrics: AdapterMetrics) -> None:
        assert cfg.url is not None
        self.cfg = cfg
        self.interval = cfg.refresh_interval_seconds
        self.query_deadline = cfg.deadline
        self.url = cfg.url.rstrip("/") + "/api/v1/query"
        self.metrics = metrics
        self._session: aiohttp.ClientSession | None = None
        self._limit = asyncio.Semaphore(MAX_CONCURRENT_QUERIES)
        self._decoding = asyncio.Semaphore(1)
        self.horizon = Horizon(cfg.source_horizon_seconds, cfg.stale_after_seconds)
        self.idle_after = cfg.rule_idle_seconds  # rules nobody asks for are not refreshed (cache.py)
        self._dropped_logged: set[str] = set()
        # per rule: the jobs its last answer found publishing under an (instance, job) that is no
        # scrape target, whose samples older than stale_after (and, for a rule without a flag,
        # whose series seen within the horizon but not now) are always asked (those of the other
        # scraped jobs give no state while their target is up and current). Not known yet: every
        # job's are asked, until an answer tells (or, for a rule without a flag, a query fails).
        self._foreign: dict[str, set[str]] = {}
        metrics.watch_source(self.name)

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=CONNECTIONS, ssl=ssl_context(self.cfg))
        self._session = aiohttp.ClientSession(connector=connector, headers=self.cfg.headers)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _auth_headers(self) -> dict[str, str]:
        """Credentials, read from their files on every refresh so rotated secrets are picked up."""
        if self.cfg.bearer_token_file:
            token = _read_secret(self.cfg.bearer_token_file, "bearer token file", token=True)
            return {"Authorization": "Bearer " + token}
        if self.cfg.username:
            password = _read_secret(self.cfg.password_file, "password file") if self.cfg.password_file else ""
            pair = base64.b64encode(f"{self.cfg.username}:{password}".encode()).decode()
            return {"Authorization": "Basic " + pair}
        return {}

    async def query(self, promql: str, at: float | None = None, states: bool = False) -> Answer:
        """``promql``'s answer: (series, evaluation time, NaN/Inf series left out). Raises QueryError."""
        status, body = await self._post(promql, at)
        return await self._digest(status, body, states, _same, None)

    async def _post(self, promql: str, at: float | None) -> tuple[int, bytes]:
        """Send ``promql``; the answer's HTTP status and body once read. Raises QueryError."""
        assert self._session is not None, "start() first"
        timeout = aiohttp.ClientTimeout(total=self.cfg.deadline)
        # Complete answers or errors, where the engine would answer partially: Thanos Query's
        # partial_response (on by default there), VictoriaMetrics cluster's deny_partial_response.
        # Other engines ignore both. No ``time``: the engine evaluates at its own clock, so a
        # skewed adapter clock cannot ask for the past.
        data = {
            "query": promql,
            "timeout": str(self.cfg.deadline),
            "partial_response": "false",
            "deny_partial_response": "1",
        }
        if at is not None:
            data["time"] = f"{at:.3f}"
        try:
            async with self._session.post(
                self.url, data=data, headers=self._auth_headers(), timeout=timeout
            ) as resp:
                body = await resp.read()
                status = resp.status
        except TimeoutError:
            raise QueryTimeout(f"prometheus query timed out after {self.cfg.deadline}s") from None
        except aiohttp.ClientConnectorError as exc:
            why = exc.os_error.strerror if exc.os_error and exc.os_error.strerror else str(exc)
            raise QueryError(f"prometheus at {self.cfg.url} is unreachable: {why}") from None
        except (aiohttp.ClientError, ssl.SSLError, OSError, ValueError) as exc:  # ValueError: a bad header
            raise QueryError(f"prometheus request failed: {type(exc).__name__}: {exc}"[:300]) from None
        refused = auth_refusal("prometheus", self.cfg.url or "", status, self.credentials())
        if refused is not None:  # a proxy's page, not the query API's: the status says it all
            raise QueryError(refused)
        return status, body

    async def _digest(
        self,
        status: int,
        body: bytes,
        states: bool,
        then: Callable[[Answer], T],
        derive: Derive | None,
        values_label: str | None = None,
    ) -> T:
        """``then`` of the answer in ``body`` (parsed). A large answer is read series by series and
        ``then`` applied in a worker thread, so the event loop keeps answering requests meanwhile;
        one answer at a time, so that the decoded answers of every rule are never in memory at once.
        Raises QueryError."""
        limit = self.cfg.max_series_per_rule
        if len(body) < THREAD_BYTES:
            return then(parse_answer(status, body, limit, states, derive, values_label))
        async with self._decoding:
            return await asyncio.to_thread(
                lambda: then(parse_answer(status, body, limit, states, derive, values_label))
            )

    def credentials(self) -> str:
        cfg = self.cfg
        return describe_credentials(
            cfg.bearer_token_file, cfg.username, cfg.headers, cfg.cert_file, "prometheus.bearer_token_file"
        )

    async def _timed(
        self,
        promql: str,
        states: bool,
        then: Callable[[Answer], T],
        derive: Derive | None = None,
        values_label: str | None = None,
    ) -> T:
        """``then`` of ``promql``'s answer (``_digest``), sent once a slot is free
        (``MAX_CONCURRENT_QUERIES``) and timed from then until its answer is read (the wait for a
        slot is the refresh's, not the engine's; so is decoding). The slot is held until the answer
        is decoded: with more answers read than decoded, their bodies would wait in memory together.
        Raises QueryError."""
        async with self._limit:
            started = time.perf_counter()
            try:
                status, body = await self._post(promql, None)
            except QueryError as exc:
                late = isinstance(exc, QueryTimeout)
                self.metrics.upstream(self.name, time.perf_counter() - started, False, late)
                raise
            took = time.perf_counter() - started
            try:
                out = await self._digest(status, body, states, then, derive, values_label)
            except QueryError as exc:  # an error the engine answered (its own deadline: a timeout)
                self.metrics.upstream(self.name, took, False, isinstance(exc, QueryTimeout))
                raise
            self.metrics.upstream(self.name, took, True)
            return out

    def evidence(self) -> SharedEvidence:
        """A refresh's evidence query (the targets' health), asked once for every rule needing it."""

        parts = target_parts(self.horizon)
        texts = list(parts.values())

        def read(answer: Answer) -> Evidence:  # with the decoding: in a worker thread at fleet scale
            series, stamp, _ = answer
            _, found = split_parts(series, texts)
            return read_evidence({name: found[text] for name, text in parts.items()}, stamp, self.horizon)

        async def ask() -> Evidence:
            return await self._timed(parts_only(texts), True, read)

        return SharedEvidence(ask)

    def _parts_of(self, rule: RuleConfig, problems: list[str] | None, scraped: set[str]) -> dict[str, str]:
        """The source-state parts ``rule`` carries (name -> query), none without a source family.
        ``scraped``: the jobs with scrape targets, whose series are their targets' (but those the
        rule's last answer found under another instance)."""
        if rule.states_family is None:
            return {}
        selector = self._selector(rule)
        foreign = self._foreign.get(rule.name)
        own = scraped - foreign if foreign is not None else set()
        return rule_parts(rule, selector, self.horizon, problems, own)

    async def ask(
        self,
        query: str,
        rules: Sequence[RuleConfig],
        evidence: SharedEvidence,
        values_label: str | None = None,
    ) -> tuple[list[Series], float, list[Series], dict[str, tuple[Series, ...] | None]]:
        """``query``'s series, evaluation time and NaN/Inf series left out, with the source states of
        each of ``rules`` (None for a rule without a source family): the refresh's evidence query
        first (shared), then ``query`` carrying the rules' own parts. ``values_label``: the label
        holding each value (a ``count_values`` query). Raises QueryError."""
        known: dict[tuple[str, str], Target] = {}
        shared: dict[str, list[Series]] = {}
        problems: list[str] | None = None
        scraped: set[str] = set()
        if any(rule.states_family is not None for rule in rules):
            try:
                read = await evidence.get()
            except QueryError as exc:
                raise QueryError(f"the source evidence query failed: {exc}"[:300]) from None
            known, shared, problems, scraped = read.known, read.parts, read.problems, read.scraped
        named = {rule.name: self._parts_of(rule, problems, scraped) for rule in rules}
        needed = list(dict.fromkeys(p for parts in named.values() for p in parts.values()))
        # telling the parts apart and classifying is done with the decoding (at fleet scale, in the
        # worker thread: hundreds of ms the event loop would not answer requests otherwise)
        asks_late = problems is not None  # a target failing before the query: what it held is asked again
        sort_out = functools.partial(self._sort_out, rules, named, needed, known, shared, asks_late)
        # the workload of each value from its pod as it is read: never a label set without it kept
        derive = with_workload if rules and all(r.workload_from_pod for r in rules) else None
        try:
            series, stamp, dropped, states, failed, pending = await self._timed(
                with_parts(query, needed), bool(needed), sort_out, derive, values_label
            )
        except QueryError:
            for rule in rules:  # too slow with every job's gone series: the next asks the others'
                if rule.states_family is not None and rule.up_family is None:
                    self._foreign.setdefault(rule.name, set())
            raise
        if pending:  # the rules without a flag, in a refresh during which a target failed
            late = [r for r in rules if r.name in pending]
            states = await self._ask_late(late, failed, known, states, derive, pending)
        return series, stamp, dropped, states

    async def _ask_late(
        self,
        rules: Sequence[RuleConfig],
        failed: list[str],
        known: dict[tuple[str, str], Target],
        states: dict[str, tuple[Series, ...] | None],
        derive: Derive | None,
        pending: dict[str, dict[str, list[Series]]],
    ) -> dict[str, tuple[Series, ...] | None]:
        """``states`` with those of the series of ``failed`` (instances whose targets were up in the
        evidence but failed before the rules' query was evaluated) for ``rules``, which have no
        flag: their query left those series out, and the values no longer hold them (staleness
        markers), so without this a key such a target held would be missing or partial for a
        refresh. One more query, only in a refresh during which a target failed.

        ``pending``: each rule's parts of the first query (with the evidence's), whose ``unreached``
        targets are judged here, with what the failed targets held: a target scraped first after
        the horizon's last subquery step has no good scrape on its grid, and only this query can
        tell it held series (then they are missed, not the rule's every answer unknown)."""
        named = {rule.name: late_parts(rule, self._selector(rule), self.horizon, failed) for rule in rules}
        needed = list(dict.fromkeys(p for parts in named.values() for p in parts.values()))
        try:
            series, stamp, _ = await self._timed(parts_only(needed), True, _same, derive)
        except QueryError as exc:
            why = f"{', '.join(failed)} failed during the refresh, and asking what it held failed: {exc}"
            gap = Series({UNKNOWN: why[:300]}, TAINTED)
            return {
                **states,
                **{
                    rule.name: (*(states[rule.name] or ()), gap, *self._unreached(rule, pending, known))
                    for rule in rules
                },
            }
        _, found = split_parts(series, needed)
        out = dict(states)
        for rule in rules:
            parts = {name: found[part] for name, part in named[rule.name].items()}
            before = out[rule.name] or ()
            had = {frozenset(s.labels.items()) for s in before}  # a series the first query had timed
            judged = classify(rule, parts, known, stamp, self.horizon)
            more = [s for s in judged if frozenset(s.labels.items()) not in had]
            out[rule.name] = (*before, *more, *self._unreached(rule, pending, known, parts))
        return out

    def _unreached(
        self,
        rule: RuleConfig,
        pending: dict[str, dict[str, list[Series]]],
        known: dict[tuple[str, str], Target],
        late: dict[str, list[Series]] | None = None,
    ) -> list[Series]:
        """``unreached`` of ``rule`` from its first query's parts (``pending``) and, when asked,
        what the failed targets held (``late``'s ``cur`` and ``seen``)."""
        parts = dict(pending.get(rule.name, {}))
        held = late or {}
        for name in ("cur", "seen"):
            parts[name] = [*parts.get(name, ()), *held.get(name, ())]
        return unreached(rule, parts, known, self.horizon)

    def _selector(self, rule: RuleConfig) -> str:
        assert rule.states_family is not None
        return render(f"{rule.states_family}{{<<.LabelMatchers>>}}", rule.matchers)

    def _sort_out(
        self,
        rules: Sequence[RuleConfig],
        named: dict[str, dict[str, str]],
        needed: list[str],
        known: dict[tuple[str, str], Target],
        shared: dict[str, list[Series]],
        asks_late: bool,
        answer: Answer,
    ) -> tuple[
        list[Series],
        float,
        list[Series],
        dict[str, tuple[Series, ...] | None],
        list[str],
        dict[str, dict[str, list[Series]]],
    ]:
        """``ask``'s answer from its query's: the rules' own series, each one's source states, the
        instances of the targets up in the evidence but failing when the query was evaluated, and
        (``asks_late``: what they held will be asked again) the parts of the rules without a flag,
        whose ``unreached`` targets are judged once it is (``_ask_late``)."""
        series, stamp, dropped = answer
        series, found = split_parts(series, needed)
        dropped, nan = split_parts(dropped, needed)  # a part's NaN is no value: never a state
        failed = sorted({i for i, _ in failed_since(known, {"down": found.get(DOWN_NOW, [])})})
        states: dict[str, tuple[Series, ...] | None] = {}
        pending: dict[str, dict[str, list[Series]]] = {}
        for rule in rules:
            if not named[rule.name]:
                states[rule.name] = None
                continue
            parts = {name: found[part] for name, part in named[rule.name].items()}
            if rule.up_family is not None:
                # the jobs publishing a flag: its every series now (``cur``), a NaN one too
                parts["jobs"] = nan[named[rule.name]["cur"]]
                self._foreign[rule.name] = foreign_jobs({"jobs": [*parts["cur"], *parts["jobs"]]}, known)
            else:
                self._foreign[rule.name] = foreign_jobs(parts, known)
            classified = classify(rule, parts, known, stamp, self.horizon)
            # the per-job parts (how often each job was scraped) come with the evidence query
            if failed and asks_late and rule.up_family is None:  # judged with what the failed held
                pending[rule.name] = {**shared, **parts}
                states[rule.name] = tuple(classified)
            else:
                states[rule.name] = (*classified, *unreached(rule, {**shared, **parts}, known, self.horizon))
        return series, stamp, dropped, states, failed, pending

    async def _collect_rule(self, rule: RuleConfig, evidence: SharedEvidence) -> RuleResult:
        assert rule.query is not None
        try:
            query = render(rule.query, rule.matchers)
            series, stamp, dropped, states = await self.ask(query, [rule], evidence)
        except QueryError as exc:
            return RuleResult(error=str(exc))
        return self._result(rule, series, stamp, dropped, states[rule.name])

    async def _collect_pair(self, pair: FlagPair, evidence: SharedEvidence) -> tuple[RuleResult, RuleResult]:
        """The results of a flag rule and of its complement, from one query (``flagpairs``)."""
        flag, complement = pair.flag, pair.complement
        try:
            query = render(pair.query, flag.matchers)
            series, stamp, dropped, states = await self.ask(query, [flag, complement], evidence, FLAG_VALUES)
        except QueryError as exc:
            return RuleResult(error=str(exc)), RuleResult(error=str(exc))
        highs, lows = await in_thread_if_large(extremes, series)
        return (
            self._result(flag, highs, stamp, dropped, states[flag.name]),
            self._result(complement, lows, stamp, dropped, states[complement.name]),
        )

    def _result(
        self,
        rule: RuleConfig,
        series: Sequence[Series],
        stamp: float,
        dropped: Sequence[Series],
        states: tuple[Series, ...] | None,
    ) -> RuleResult:
        """``rule``'s result from its answer: its values and states, its NaN/Inf series refused."""
        if dropped and rule.name not in self._dropped_logged:
            self._dropped_logged.add(rule.name)
            event(log, logging.WARNING, "NaN or infinite samples refused", rule=rule.name, count=len(dropped))
        derived = up_from_values(rule)
        result = RuleResult(tuple(series), stamp, sources=states, up_from_values=derived)
        return refuse_non_finite(result, dropped, self.name)

    def next_delay(self, elapsed: float, age: float = 0.0) -> float:
        """Until the next refresh: one every ``interval``, or every twice the last refresh's time
        where that is longer. A replica whose refreshes take longer than its interval would
        otherwise keep the engine busy without a pause, every query slower for the others', until
        they all pass their deadline together (measured at 40,000 GPUs: docs/fleet-scale.md);
        pausing as long as the refresh took keeps it at half the engine's time at most.

        That pause is shortened where the answers now served (``age`` seconds old when they were
        put in: the refresh's decoding after its answers came in) would otherwise be older than
        twice the interval when the next refresh, taking as long, replaces them, if a pause that
        short still keeps the refresh within ``FRESH_REFRESH_SHARE`` of the replica's time. A
        refresh slower than that misses the freshness anyway: its pause stays as long as it took."""
        fair = elapsed * (1 / MAX_REFRESH_SHARE - 1)
        fresh = 2 * self.interval - elapsed - age  # the longest pause keeping answers within 2 intervals
        if elapsed * (1 / FRESH_REFRESH_SHARE - 1) <= fresh < fair:
            fair = fresh
        return max(0.0, self.interval - elapsed, fair)  # never more than one refresh per interval

    async def collect(self, rules: Sequence[RuleConfig], everything: bool = True) -> dict[str, RuleResult]:
        evidence = self.evidence()
        pairs = flag_pairs(rules)
        paired = {name for pair in pairs for name in (pair.flag.name, pair.complement.name)}
        singles = [rule for rule in rules if rule.name not in paired]
        try:
            results, both = await asyncio.gather(
                asyncio.gather(*(self._collect_rule(r, evidence) for r in singles)),
                asyncio.gather(*(self._collect_pair(pair, evidence) for pair in pairs)),
            )
        finally:
            evidence.close()
        out = {rule.name: result for rule, result in zip(singles, results, strict=True)}
        for pair, (flag, complement) in zip(pairs, both, strict=True):
            out[pair.flag.name], out[pair.complement.name] = flag, complement
        return {rule.name: out[rule.name] for rule in rules}
