"""Fuzzing the running adapter (backend up): paths, namespaces, metrics and selectors of any shape get
2xx or 4xx answers, every error a metav1.Status whose code is the HTTP status, never a 5xx."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from urllib.parse import quote, urlsplit

import pytest
from adapter_support import adapter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servers import Process, exporter

from adapter.rules import BUILTIN_RULES

METRICS = [r.name for r in BUILTIN_RULES]
WORDS = [
    "apis",
    "external.metrics.k8s.io",
    "custom.metrics.k8s.io",
    "v1beta1",
    "v1beta2",
    "v1",
    "namespaces",
    "pods",
    "*",
    "metrics",
    "deployments.apps",
    "nodes",
    "prod",
    "default",
    "",
    ".",
    "..",
    *METRICS,
]
SELECTOR_ATOMS = [
    "queue",
    "=",
    "==",
    "!=",
    "!",
    ",",
    " in ",
    " notin ",
    "(",
    ")",
    "jobs",
    "a.b/c",
    ">",
    "<",
    "1",
    " ",
    "-",
    "_",
    "%",
    "é",
    "\x00",
    "x" * 70,
]

any_text = st.text(max_size=24)
segment = st.one_of(
    st.sampled_from(WORDS),
    any_text.map(lambda s: quote(s, safe="")),
    st.from_regex(r"[A-Za-z0-9._~%*:@!$&'()+,;=-]{0,12}", fullmatch=True),
)
selector = st.one_of(any_text, st.lists(st.sampled_from(SELECTOR_ATOMS), max_size=10).map("".join))
query = st.dictionaries(
    st.sampled_from(["labelSelector", "metricLabelSelector", "namespace", "x"]), selector, max_size=2
).map(lambda q: "&".join(f"{k}={quote(v, safe='')}" for k, v in q.items()))
external = st.builds(
    lambda ns, metric, q: (
        f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{quote(ns, safe='')}/{quote(metric, safe='')}?{q}"
    ),
    any_text,
    st.one_of(st.sampled_from(METRICS), any_text),
    query,
)
custom = st.builds(
    lambda version, segs, q: f"/apis/custom.metrics.k8s.io/{version}/" + "/".join(segs) + f"?{q}",
    st.sampled_from(["v1beta1", "v1beta2", "v9"]),
    st.lists(segment, min_size=1, max_size=6),
    query,
)
anywhere = st.builds(lambda segs, q: "/" + "/".join(segs) + f"?{q}", st.lists(segment, max_size=8), query)
keda = st.builds(
    lambda m, q: f"/keda/v1/metrics/{quote(m, safe='')}?{q}",
    st.one_of(st.sampled_from(METRICS), any_text),
    query,
)


@pytest.fixture(scope="module")
def running() -> Iterator[Process]:
    with exporter(["--simulate"]) as sim, adapter(["--exporter", sim.url, "--insecure-http"]) as p:
        yield p


def ask(base: str, method: str, path: str) -> tuple[int, str, bytes]:
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type", ""), resp.read()
    finally:
        conn.close()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    path=st.one_of(external, custom, anywhere, keda),
    method=st.sampled_from(["GET", "GET", "GET", "POST", "DELETE"]),
)
def test_only_2xx_or_4xx_status(running: Process, path: str, method: str) -> None:
    code, content_type, body = ask(running.url, method, path)
    assert 200 <= code < 500, (path, code, body[:300])
    if path.startswith(("/apis", "/keda", "/openapi")) or code >= 400:
        assert content_type.startswith("application/json"), (path, code, content_type, body[:200])
        answer = json.loads(body)
        if code >= 400:
            assert answer["kind"] == "Status" and answer["code"] == code and answer["message"], (path, answer)
