"""Samples older than ``stale_after`` of a rule with a flag (the queue rules), on both engines.

A sample of a scrape target that is up and current carries that scrape's time (exporters write no
timestamps), so from the second refresh on a queue rule's query asks the old samples of the jobs
that are not scraped, and of a scraped job whose flags name an instance it does not scrape
(federated with ``honor_labels`` into a job of the same name), not those of the other scraped
jobs. Written from the history before running (``stale_after_seconds`` 60, the engines' lookback
5 minutes, 15 s apart over 10 minutes):

- node-a (job ``rightsizer``), up and current: queue ``jobs``, flag 1, depth 5 -> 200 "5".
- job ``federated``: its target ``proxy:9090`` is up and current, and its series keep the
  instances of the exporters behind it: ``remote-1:9400`` publishes queue ``live`` now, depth 7
  -> 200 "7"; ``remote-2:9400`` published queue ``fed`` (flag 1, depth 3) until 2 minutes ago ->
  503 naming remote-2 (on Prometheus its samples are still selected, and old: only the old
  samples' vector tells; VictoriaMetrics no longer selects them: gone, no current sample).

Every refresh answers alike, one query per rule and one evidence query.
"""

from __future__ import annotations

from typing import Any

from adapter_support import assert_status, client_get, recording_adapter, refreshes
from report_history import Samples, engine_fixture

QUERY = "(max without (instance, job) (rightsizer_queue_depth"  # the queue depth rule's
DEPTH = "/apis/external.metrics.k8s.io/v1beta1/namespaces/prod/rightsizer_queue_depth"
STEP, SPAN = 15.0, 600.0
# (target labels of the series, the target scraped (its `up`), queue, depth, gone this many
# seconds before now)
QUEUES = [
    ('instance="node-a:9400",job="rightsizer"', "jobs", 5, 0.0),
    ('instance="remote-1:9400",job="federated"', "live", 7, 0.0),
    ('instance="remote-2:9400",job="federated"', "fed", 3, 120.0),
]
JOBS = {"node-a:9400": "rightsizer", "proxy:9090": "federated"}


def history(end: float) -> dict[str, list[str]]:
    out = Samples()
    for k in range(int(SPAN / STEP) + 1):
        t = end - SPAN + k * STEP
        for instance, job in JOBS.items():
            out.healthy(f'instance="{instance}",job="{job}"', t)
        for target, queue, depth, gone in QUEUES:
            if end - t >= gone:
                labels = f'{target},queue="{queue}",kind="redis",namespace="prod"'
                out.add("rightsizer_queue_source_up", labels, 1, t)
                out.add("rightsizer_queue_depth", labels, depth, t)
    return out.families


engine = engine_fixture(history)


async def test_old_flags_of_scraped_jobs_are_not_asked_after_the_first_refresh(
    engine: str, aiohttp_client: Any
) -> None:
    async with recording_adapter(engine, aiohttp_client, stale_after_seconds=60) as (client, cache, sent):
        async for refresh in refreshes(cache, sent):
            for queue, value in (("jobs", "5"), ("live", "7")):
                code, body = await client_get(client, f"{DEPTH}?labelSelector=queue%3D{queue}")
                assert code == 200 and [i["value"] for i in body["items"]] == [value], (refresh, queue, body)
            missed = await client_get(client, f"{DEPTH}?labelSelector=queue%3Dfed")
            assert_status(missed, 503, "ServiceUnavailable")
            assert "remote-2:9400 (job federated)" in missed[1]["message"], (refresh, missed)
            (depth,) = [q for q in sent if q.startswith(QUERY)]
            # the first refresh knows no job's flags yet; then job rightsizer is left out, not federated
            selected = "rightsizer_queue_source_up" + ('{job!~"rightsizer"}' if refresh else "{}")
            assert f"timestamp({selected}) < (time() - 60)" in depth, (refresh, depth)
            assert "federated" not in depth  # a job carrying flags of instances it does not scrape
