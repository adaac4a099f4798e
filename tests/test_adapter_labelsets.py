"""Label sets shared process-wide (adapter/labelsets.py): two rules' series of one GPU hold the same
labels object, a second refresh reuses the first's, nothing may change a shared set, and the table
forgets the sets of pods that were replaced."""

from __future__ import annotations

import gc
import json
from typing import Any

import pytest
from test_adapter_prometheus import FakePrometheus, cache_for, prom  # noqa: F401  (fixture)

from adapter import labelsets
from adapter.sources.prometheus import parse_answer

GPU_RULES = ("rightsizer_gpu_utilization_ratio", "rightsizer_gpu_memory_used_bytes")


def gpus(pods: list[str]) -> dict[str, Any]:
    result = [
        {"metric": {"namespace": "llm", "pod": p, "container": "server", "UUID": "G" + p}, "value": [1, "1"]}
        for p in pods
    ]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def answering(fake: FakePrometheus, pods: list[str]) -> None:
    empty = (200, {"status": "success", "data": {"resultType": "vector", "result": []}})
    # the GPU rules' own query (their source-state parts are answered empty: no states)
    fake.answer = lambda q: (200, gpus(pods)) if q.startswith("(avg by") or q.startswith("(sum by") else empty


def labels_of(cache: Any, rule: str) -> dict[str, Any]:
    vector = cache.states[rule].vector
    assert vector is not None, cache.states[rule].error
    return {s.labels["pod"]: s.labels for s in vector.series}


async def test_two_rules_and_two_refreshes_hold_one_labels_object_per_gpu(prom: FakePrometheus) -> None:  # noqa: F811
    answering(prom, ["a-0-1", "b-0-2"])
    cache, source, _ = await cache_for(prom)
    try:
        await cache.refresh_once()
        first = labels_of(cache, GPU_RULES[0])
        other = labels_of(cache, GPU_RULES[1])
        assert set(first) == {"a-0-1", "b-0-2"}
        assert first["a-0-1"]["workload"] == "a-0"
        for pod in first:
            assert first[pod] is other[pod]  # the same object, not an equal copy
        await cache.refresh_once()
        again = labels_of(cache, GPU_RULES[0])
        for pod in first:
            assert again[pod] is first[pod]  # the second refresh reuses the first's
    finally:
        await source.close()


async def test_the_table_stays_bounded_when_pods_are_replaced_every_refresh(prom: FakePrometheus) -> None:  # noqa: F811
    gc.collect()  # the caches of other tests hold their own sets while they live
    cache, source, _ = await cache_for(prom)
    try:
        sizes = []
        for refresh in range(6):
            answering(prom, [f"w{refresh}-{i}-x" for i in range(50)])
            await cache.refresh_once()
            assert len(labels_of(cache, GPU_RULES[0])) == 50
            sizes.append(labelsets.size())
            pods = {ls.get("pod", "") for ls in labelsets._table}
            # the sets of the replaced pods, and those before add_workload, are forgotten
            assert not any(p.startswith(f"w{r}-") for p in pods for r in range(refresh))
            ours = [ls for ls in labelsets._table if ls.get("pod", "").startswith(f"w{refresh}-")]
            assert len(ours) == 50 and all("workload" in ls for ls in ours)
        # each refresh's 50 GPUs, one set each (held by every GPU rule); other live caches' sets aside
        assert len(set(sizes)) == 1
    finally:
        await source.close()


def test_a_shared_label_set_cannot_be_changed() -> None:
    body = json.dumps(gpus(["p-1-2"])).encode()
    (one,), _, _ = parse_answer(200, body, 100)
    (two,), _, _ = parse_answer(200, body, 100)
    assert one.labels is two.labels
    for change in (
        lambda d: d.__setitem__("pod", "x"),
        lambda d: d.pop("pod"),
        lambda d: d.update(pod="x"),
        lambda d: d.setdefault("new", "x"),
        lambda d: d.clear(),
        lambda d: d.__delitem__("pod"),
    ):
        with pytest.raises(TypeError, match="shared"):
            change(one.labels)
    copy = dict(one.labels)
    copy["pod"] = "changed"  # a copy is a plain dict
    assert one.labels["pod"] == "p-1-2" and {**one.labels, "k": "v"}["k"] == "v"


async def test_a_gpu_series_is_shared_with_its_workload_only(prom: FakePrometheus, monkeypatch: Any) -> None:  # noqa: F811
    """The workload is derived from the pod as each value is read, before its label set is shared:
    the set without it is never made (at 40,000 GPUs, 40,000 sets made and dropped every refresh)."""
    from adapter.sources import prometheus as module

    shared: list[dict[str, str]] = []

    def recording(labels: Any) -> Any:
        shared.append(dict(labels))
        return labelsets.intern(labels)

    monkeypatch.setattr(module, "intern", recording)
    answering(prom, ["a-0-1", "b-0-2"])
    cache, source, _ = await cache_for(prom)
    try:
        await cache.refresh_once()
        assert labels_of(cache, GPU_RULES[0])["b-0-2"]["workload"] == "b-0"
        pods = [ls for ls in shared if "pod" in ls]
        # once per GPU: the other GPU rules' answers name the same label sets, read from the first's
        # text (SeenTexts), not interned again
        assert len(pods) >= 2 and all(ls.get("workload") for ls in pods)
    finally:
        await source.close()
