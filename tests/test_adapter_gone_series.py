"""Series gone within the horizon, on both engines: which jobs the rules' queries read an hour of.

A rule without a flag (the GPU rules) gets no state from a series its target, up and current, no
longer publishes, so its query reads the gone series of the scraped jobs only for the targets
that are not current; every other job's (imported, remote-written, federated under a job of its
own) are read in full. A job that is scraped and also carries series of instances it does not
scrape (federated with ``honor_labels`` into a job of the same name) is found from its current
series and read in full too. Written from the history before running (``stale_after_seconds``
600, the engines' lookback 5 minutes, 15 s apart over half an hour):

- node-a (job ``rightsizer``), up and current: pod ``worker-..`` now -> ``workload=worker``
  200 "300m"; pod ``old-..`` left it 20 minutes ago while it stayed up -> ``workload=old`` 404.
- job ``federated``: its target ``proxy:9090`` is up and current, and its series keep the
  instances of the exporters behind it: ``remote-1:9400`` publishes pod ``live-..`` now -> 200
  "600m"; ``remote-2:9400`` published pod ``fed-..`` until 10 minutes ago -> 503 naming remote-2.
- job ``imported`` (no ``up`` at all): pod ``imp-..`` until 10 minutes ago -> 503 naming it.

Every refresh answers alike; from the second on, the GPU rules' queries leave job ``rightsizer``
out of the gone series and of the samples older than ``stale_after`` (and only it), still one
query per rule and one evidence query.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from adapter_support import assert_status, client_get, recording_adapter, refreshes
from report_history import Samples, engine_fixture

from adapter.cache import Cache

UTIL = "/apis/external.metrics.k8s.io/v1beta1/namespaces/prod/rightsizer_gpu_utilization_ratio"
STEP, SPAN = 15.0, 1800.0
# (target labels of the series, the target scraped (its `up`), or None, pod, utilisation %, gone
# this many seconds before now)
SERIES = [
    ('instance="node-a:9400",job="rightsizer"', "node-a:9400", "worker-5d8f7c9b6d-bbbbb", 30, 0.0),
    ('instance="node-a:9400",job="rightsizer"', "node-a:9400", "old-5d8f7c9b6d-ccccc", 70, 1200.0),
    ('instance="remote-1:9400",job="federated"', "proxy:9090", "live-5d8f7c9b6d-lllll", 60, 0.0),
    ('instance="remote-2:9400",job="federated"', "proxy:9090", "fed-5d8f7c9b6d-fffff", 80, 600.0),
    ('instance="importer:1",job="imported"', None, "imp-5d8f7c9b6d-ddddd", 90, 600.0),
]
JOBS = {"node-a:9400": "rightsizer", "proxy:9090": "federated"}


def history(end: float) -> dict[str, list[str]]:
    out = Samples()
    for k in range(int(SPAN / STEP) + 1):
        t = end - SPAN + k * STEP
        for instance, job in JOBS.items():
            out.healthy(f'instance="{instance}",job="{job}"', t)
        for labels, _, pod, util, gone in SERIES:
            if end - t >= gone:
                gpu = f'namespace="prod",pod="{pod}",container="srv",UUID="GPU-{pod[-5:]}",gpu="0"'
                out.add("DCGM_FI_DEV_GPU_UTIL", f"{labels},{gpu}", util, t)
    return out.families


engine = engine_fixture(history)


@pytest.fixture
async def served(engine: str, aiohttp_client: Any) -> AsyncIterator[tuple[Any, Cache, list[str]]]:
    async with recording_adapter(engine, aiohttp_client, stale_after_seconds=600) as found:
        yield found


async def test_gone_series_of_unscraped_instances_are_missed_at_every_refresh(served: Any) -> None:
    client, cache, sent = served
    async for refresh in refreshes(cache, sent):
        code, body = await client_get(client, f"{UTIL}?labelSelector=workload%3Dworker")
        assert code == 200 and [i["value"] for i in body["items"]] == ["300m"], (refresh, body)
        code, body = await client_get(client, f"{UTIL}?labelSelector=workload%3Dlive")
        assert code == 200 and [i["value"] for i in body["items"]] == ["600m"], (refresh, body)
        assert_status(await client_get(client, f"{UTIL}?labelSelector=workload%3Dold"), 404, "NotFound")
        missing = (("fed", "remote-2:9400 (job federated)"), ("imp", "importer:1 (job imported)"))
        for workload, source in missing:
            missed = await client_get(client, f"{UTIL}?labelSelector=workload%3D{workload}")
            assert_status(missed, 503, "ServiceUnavailable")
            assert source in missed[1]["message"] and "no current sample" in missed[1]["message"], missed
        (util,) = [q for q in sent if q.startswith("(avg by (namespace, pod, container, UUID) (DCGM_FI_DEV")]
        left_out = 'job!~"rightsizer"' in util
        assert left_out == (refresh > 0), (refresh, util)  # the first refresh knows no job's series yet
        # so do the samples older than stale_after: a scrape's samples carry the scrape's time
        selected = 'DCGM_FI_DEV_GPU_UTIL{pod!=""' + (',job!~"rightsizer"}' if refresh else "}")
        assert f"timestamp({selected}) < (time() - 600)" in util, (refresh, util)
        assert "federated" not in util  # a job carrying series of instances it does not scrape
