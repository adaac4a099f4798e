"""How old one adapter replica's answers get, and how much of the engine it keeps busy, when its
refreshes take about its interval (issue 32: answer freshness <= 2 x interval).

At 40,000 GPUs a refresh of the rules autoscalers ask for took 4.7 to 4.9 s of a 5 s interval
(docs/fleet-scale.md), and a refresh past half its interval is followed by a pause: how long that
pause is sets both how old answers get and how much of the engine a replica takes. What the
pacing does is measured here without an engine whose speed changes from run to run: the fake query
API of ``bench/adapter_memory.py`` answers each query after ``--engine-ms`` (a sleep, the engine's
time for a query), for ``--gpus`` GPUs; the real adapter (``python -m adapter``, HTTP, anonymous)
refreshes the two rules the fleet bench's selectors use (queue depth and GPU utilisation: a request
for each every 2 s; the other rules idle after ``rule_idle_seconds: 10``). For ``--seconds`` it
prints, from the adapter's own metrics sampled every 0.25 s, the oldest answer
(``rightsizer_adapter_cache_age_seconds`` of the two rules) and the refreshes' mean time; from the
fake engine, the share of the time a query of the adapter was at it.

    .venv/bin/python bench/adapter_pacing.py [--gpus 40000] [--engine-ms 1500] [--seconds 120]

The adapter run is the one of the repository the bench lies in (``tests/servers.py`` starts
``python -m adapter`` there): to compare two commits, run the bench from a worktree of each.
"""

from __future__ import annotations

import re
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[0] = str(BENCH.parent)  # the repository first: bench/adapter.py would shadow the package
sys.path.insert(1, str(BENCH.parent / "tests"))
sys.path.append(str(BENCH))

from adapter_memory import EXT, Busy, Engine, Fleet, fleet_arguments, next_refresh, serve  # noqa: E402
from adapter_support import ANONYMOUS, get, start_adapter  # noqa: E402

ASKED = ("rightsizer_queue_depth", "rightsizer_gpu_utilization_ratio")
AGE = re.compile(r'^rightsizer_adapter_cache_age_seconds\{rule="([^"]+)"\} (\S+)$', re.M)
DURATION = re.compile(r"^rightsizer_adapter_refresh_duration_seconds_(sum|count) (\S+)$", re.M)


def ask(url: str, fleet: Fleet, stop: threading.Event) -> None:
    """A request for each asked rule every 2 s, as autoscalers keep them refreshed."""
    workload = urllib.parse.quote(f"workload={fleet.workloads[len(fleet.workloads) // 2]}")
    while not stop.wait(2.0):
        for rule in ASKED:
            try:
                get(f"{url}{EXT}llm/{rule}?labelSelector={workload}", timeout=30)
            except OSError:  # the adapter stopping at the end
                if stop.is_set():
                    return
                raise


def main() -> None:
    ap = fleet_arguments(__doc__.split("\n\n", 1)[0])
    ap.add_argument("--engine-ms", type=float, default=1500, help="each query's time at the fake engine")
    ap.add_argument("--seconds", type=float, default=120, help="how long to observe")
    args = ap.parse_args()
    fleet = Fleet(args.gpus)
    engine = Engine(fleet)
    engine.empty = False
    busy = Busy()
    url = serve(engine, args.engine_ms / 1000, busy)
    print(f"fleet: {args.gpus} GPUs, {len(fleet.queues)} queues; each query {args.engine_ms:g} ms at the"
          f" engine; interval {args.interval:g} s; adapter of {BENCH.parent}")  # fmt: skip
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as config:
        config.write("prometheus: {rule_idle_seconds: 10}\n")
        config.flush()
        adapter = start_adapter(
            ["--prometheus-url", url, "--refresh-interval", f"{args.interval:g}", "--config", config.name],
            env={**ANONYMOUS, **dict(e.split("=", 1) for e in args.env)},
            timeout=120,
        )
        stop = threading.Event()
        asker = threading.Thread(target=ask, args=(adapter.url, fleet, stop), daemon=True)
        try:
            asker.start()
            next_refresh(adapter.url, 0, 300)
            time.sleep(20)  # the other rules idle (rule_idle_seconds 10), the asked ones refreshed
            text = get(adapter.url + "/metrics", timeout=30)[2].decode()
            before = dict(DURATION.findall(text))
            busy_before, t0 = busy.read(), time.monotonic()
            oldest = 0.0
            seen: list[tuple[float, float]] = []  # (refreshes completed, when first seen), per new count
            while time.monotonic() - t0 < args.seconds:
                text = get(adapter.url + "/metrics", timeout=30)[2].decode()
                ages = [float(v) for rule, v in AGE.findall(text) if rule in ASKED]
                oldest = max([oldest, *ages])
                done = float(dict(DURATION.findall(text))["count"])
                if not seen or done > seen[-1][0]:
                    seen.append((done, time.monotonic()))
                time.sleep(0.25)
            share = (busy.read() - busy_before) / (time.monotonic() - t0)
            after = dict(DURATION.findall(text))
        finally:
            stop.set()
            adapter.stop()
    count = float(after["count"]) - float(before["count"])
    mean = (float(after["sum"]) - float(before["sum"])) / count if count else float("nan")
    # start to start, from the first and last completions seen (to within the 0.25 s sampling)
    every = (seen[-1][1] - seen[1][1]) / (seen[-1][0] - seen[1][0]) if len(seen) > 2 else float("nan")
    print(f"  {count:.0f} refreshes in {args.seconds:g} s (one every {every:.2f} s), mean {mean:.2f} s each")
    print(f"  oldest answer seen {oldest:.2f} s (goal <= {2 * args.interval:g} s)")
    print(f"  engine busy with the adapter's queries {share:.0%} of the time")


if __name__ == "__main__":
    main()
