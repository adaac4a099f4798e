"""A small client of the Prometheus HTTP query API (Prometheus, Thanos Query, Mimir, VictoriaMetrics).

Instant queries (``/api/v1/query``) for the judgement and range queries (``/api/v1/query_range``)
for the HTML report's charts, so any server speaking that API works; a path prefix in the URL
(Mimir's ``/prometheus``) is kept. Every request has a deadline; every expected fault
becomes a ``ReportError`` with a one-line message.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rightsizer_core.files import read_token
from rightsizer_core.httpauth import auth_refusal, describe_credentials


class ReportError(Exception):
    """``rightsizer report`` cannot go on; the message says why."""


@dataclass(frozen=True, slots=True)
class Sample:
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class RangeSeries:
    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]  # (Unix seconds, value), oldest first, finite values only


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def parse_duration(text: str, flag: str) -> float:
    """Prometheus-style durations: 7d, 24h, 90m, 1h30m, 3600s, 2w."""
    compact = text.strip().lower()
    pos, total = 0, 0.0
    for m in _DURATION.finditer(compact):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _SECONDS[m.group(2)]
        pos = m.end()
    if pos != len(compact) or not compact:
        raise ReportError(f"{flag} {text!r} is not a duration (examples: 7d, 24h, 90m, 1h30m)")
    if total <= 0:
        raise ReportError(f"{flag} {text!r} must be longer than 0 (examples: 7d, 24h, 90m, 1h30m)")
    return total


def promql_duration(seconds: float) -> str:
    return f"{max(1, round(seconds))}s"


def sample_span(metric: str, by: str, window: str, step: str) -> tuple[str, str]:
    """PromQL for when each series of ``metric`` was first and last sampled in ``window``, to
    ``step``: the earliest and latest subquery step whose preceding ``step`` holds a sample.

    Not ``min_over_time(timestamp(metric)[window:step])``, though that names each sample's own
    time: Prometheus (2.42 measured) evaluates ``timestamp`` of a selector in a subquery step by
    step with a fresh series iterator each time, so its cost grows with steps x samples (6 s for
    100 GPUs x 1 day at 30 s, against 0.3 s for this form; minutes at a week). Counting the
    samples of each step's range reads every sample once, on every engine."""
    seen = f"(count_over_time({metric}[{step}]) * 0 + time())[{window}:{step}]"
    return f"min by ({by}) (min_over_time({seen}))", f"max by ({by}) (max_over_time({seen}))"


class PrometheusClient:
    def __init__(
        self,
        url: str,
        timeout: float,
        headers: Mapping[str, str] | None = None,
        credentials: str | None = None,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ReportError(f"--prometheus-url {url!r} must be an http:// or https:// URL")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.headers = dict(headers or {})
        # in words, for a 401 or 403 (``credentials_of``; else what the headers carry)
        self.credentials = credentials or describe_credentials(headers=self.headers)

    def query(self, expr: str, at: float) -> list[Sample]:
        return _vector(self._post("query", {"query": expr, "time": f"{at:.3f}"}, expr), self.url)

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[RangeSeries]:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:.3f}"}
        return _matrix(self._post("query_range", params, expr), self.url)

    def _post(self, endpoint: str, params: dict[str, str], expr: str) -> bytes:
        body = urllib.parse.urlencode(params).encode()
        req = urllib.request.Request(
            f"{self.url}/api/v1/{endpoint}",
            data=body,
            headers={"Content-Type": "application/x-www-form-urlencoded", **self.headers},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            refused = auth_refusal("Prometheus", self.url, exc.code, self.credentials)
            if refused is not None:  # a proxy's page, not the query API's: the status says it all
                raise ReportError(refused) from None
            detail = _error_of(exc.read())
            if detail is None:  # Prometheus answers every error in JSON: this is some other server
                raise ReportError(
                    f"{self.url} is not the Prometheus query API: /api/v1/{endpoint} answered "
                    f"{exc.code} {' '.join(str(exc.reason).split())} (is the URL right? Mimir wants its "
                    "/prometheus prefix)"
                ) from None
            raise ReportError(f"Prometheus at {self.url} answered {exc.code} to {expr!r}: {detail}") from None
        except TimeoutError:
            raise ReportError(
                f"Prometheus at {self.url} did not answer within {self.timeout:g} s "
                "(raise --timeout or shorten --window)"
            ) from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, TimeoutError | socket.timeout):
                raise ReportError(
                    f"Prometheus at {self.url} did not answer within {self.timeout:g} s"
                ) from None
            why = getattr(reason, "strerror", None) or str(reason)
            raise ReportError(f"cannot reach Prometheus at {self.url}: {why}") from None
        except OSError as exc:
            raise ReportError(f"cannot reach Prometheus at {self.url}: {exc.strerror or exc}") from None
        return raw


def _error_of(raw: bytes) -> str | None:
    """The error a Prometheus-like server put in its JSON answer, on one line; None when the
    answer is not the query API's JSON (an HTML page, plain text)."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict) or "status" not in data:
        return None
    return " ".join(str(data.get("error") or data).split())[:300]


def _result(raw: bytes, url: str, kind: str) -> list[dict[str, Any]]:
    data = json.loads(raw)
    if data.get("status") != "success":
        raise ReportError(f"Prometheus at {url} failed the query: {data.get('error', 'no detail')}")
    result = data["data"]
    if result["resultType"] != kind:
        raise ReportError(f"Prometheus at {url} answered a {result['resultType']}, not a {kind}")
    return list(result["result"])


def _not_the_api(url: str) -> ReportError:
    return ReportError(
        f"{url} did not answer like the Prometheus query API (is the URL right? "
        "Mimir wants its /prometheus prefix)"
    )


def _matrix(raw: bytes, url: str) -> list[RangeSeries]:
    try:
        out = []
        for item in _result(raw, url, "matrix"):
            points = ((float(t), float(v)) for t, v in item["values"])
            out.append(RangeSeries(dict(item["metric"]), tuple(p for p in points if math.isfinite(p[1]))))
        return out
    except ReportError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):
        raise _not_the_api(url) from None


def _vector(raw: bytes, url: str) -> list[Sample]:
    try:
        out = []
        for item in _result(raw, url, "vector"):
            value = float(item["value"][1])
            if math.isfinite(value):
                out.append(Sample(dict(item["metric"]), value))
        return out
    except ReportError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):
        raise _not_the_api(url) from None


_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")


def add_auth_arguments(p: argparse.ArgumentParser, what: str) -> None:
    """``--header`` and ``--bearer-token-file`` for a command that queries ``what``."""
    p.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help=f"extra HTTP header sent to {what}, e.g. 'X-Scope-OrgID: team-a' for Mimir (repeatable)",
    )
    p.add_argument(
        "--bearer-token-file", metavar="FILE", help=f"send 'Authorization: Bearer <file contents>' to {what}"
    )


def credentials_of(args: argparse.Namespace) -> str:
    """The credentials ``add_auth_arguments`` sends, in words (for a 401 or 403)."""
    headers = {name.strip(): value.strip() for name, _, value in (h.partition(":") for h in args.header)}
    return describe_credentials(args.bearer_token_file, headers=headers, bearer_setting="--bearer-token-file")


def auth_headers(args: argparse.Namespace) -> dict[str, str]:
    """The headers ``add_auth_arguments`` asked for; ReportError (one line) when one is malformed
    or the token file cannot be read."""
    headers = {}
    for h in args.header:
        name, sep, value = h.partition(":")
        if not sep or not _HEADER_NAME.fullmatch(name.strip()):
            raise ReportError(f"--header {h!r} must be NAME:VALUE")
        if not _HEADER_VALUE.fullmatch(value.strip()):
            raise ReportError(f"--header {name.strip()}: a line break, control character or character "
                              "outside Latin-1 in its value (HTTP cannot carry it)")  # fmt: skip
        headers[name.strip()] = value.strip()
    if args.bearer_token_file:
        try:
            token = read_token(args.bearer_token_file)  # one line: a line break would add headers
        except OSError as exc:
            reason = exc.strerror or exc
            raise ReportError(f"--bearer-token-file {args.bearer_token_file}: {reason}") from None
        headers["Authorization"] = f"Bearer {token}"
    return headers
