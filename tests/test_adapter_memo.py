"""The per-refresh answer memo is keyed on the normalised request and bounded in bytes.

A fleet of 5,000 queues in one namespace: the answer for the whole namespace is about 0.9 MB.
Asked 600 times with a junk query parameter each (``?junk<i>=x``), it is the same request: one
answer is kept, not 600 (which took the adapter from 156 to 413 MiB when the raw query string was
the key). Asked with 50 distinct selectors that each select nearly everything, the kept bodies
stay within ``max_cached_answer_bytes`` (2 MiB here) and every answer is still right.
"""

from __future__ import annotations

from adapter_support import EXT, Make, client_get, exposition, make

__all__ = ["make"]

QUEUES = [{"queue": f"q{i}", "kind": "redis", "namespace": "prod", "workload": f"w{i}"} for i in range(5000)]
FLEET = exposition(
    {
        "rightsizer_queue_depth": [(q, i) for i, q in enumerate(QUEUES)],
        "rightsizer_queue_source_up": [(q, 1) for q in QUEUES],
    }
)
DEPTH = f"{EXT}/namespaces/prod/rightsizer_queue_depth"


async def test_junk_parameters_do_not_make_a_request_new(make: Make) -> None:
    client, cache, _ = await make(FLEET)
    for i in range(600):
        code, body = await client_get(client, f"{DEPTH}?junk{i}=x")
        assert code == 200 and len(body["items"]) == 5000
    assert len(cache.answers) == 1
    assert 0.8e6 < cache.answer_bytes < 1.2e6  # one body of about 0.9 MB
    for i in range(50):  # KEDA's metrics-api refuses them (a typo would widen the selection)
        code, body = await client_get(client, f"/keda/v1/metrics/rightsizer_queue_depth?namespace=prod&x={i}")
        assert code == 400 and "unknown keys: 'x'" in body["message"], body
    code, body = await client_get(client, "/keda/v1/metrics/rightsizer_queue_depth?namespace=prod")
    assert code == 200 and body["value"] == sum(range(5000))
    assert len(cache.answers) == 2


async def test_the_memo_is_bounded_in_bytes(make: Make) -> None:
    client, cache, _ = await make(FLEET, max_cached_answer_bytes=2 * 2**20)
    for i in range(50):
        code, body = await client_get(client, f"{DEPTH}?labelSelector=queue%21%3Dq{i}")
        assert code == 200 and len(body["items"]) == 4999
        assert f"q{i}" not in {item["metricLabels"]["queue"] for item in body["items"]}
        assert cache.answer_bytes <= 2 * 2**20
    assert 1 <= len(cache.answers) <= 2  # about 0.9 MB each
