"""Latency histograms of a simulated inference server, from its workload's own physics.

Service times come from the resource that binds the work (``serving.Serving``), queueing from load:

- a decode step with ``b`` sequences in flight takes ``step_seconds(b)`` (weights and KV cache read
  at the device's bandwidth, or the FLOPs at its dense rate, whichever is longer); prefill shares
  the GPU with decode, so inter-token latency is the step over the share of time left to decode:
  ITL = step / (1 - u_prefill), u_prefill = prompt tokens/s x prefill seconds per token;
- prefill of a request's prompt takes its tokens x 2 x active parameters / dense FLOP/s;
- the queue wait follows Little's law: mean wait = mean queue depth / requests per second (the
  depth the workload's queue shows at that time, the same the queue publishes);
- TTFT = wait + prefill + one decode step; end to end = TTFT + (tokens per request - 1) x ITL.

Each service time is lognormal around its mean with the workload's ``latency_spread`` (sigma of
its logarithm); the wait is exponential. TTFT and end to end are one request's wait followed by
its service (prefill and one step; for end to end also the decode, the same lognormal stretched),
so no request finishes before its first token nor gets it before leaving the queue: at every
bound, end to end counts no more than TTFT, and TTFT no more than queue time. The cumulative
histograms at time t integrate the requests served so far (the workload's served request rate,
``requests_total``) over those distributions in 10-second slices, on each server's own bucket
layout: vLLM's and SGLang's defaults, TGI's exponential duration buckets (no TTFT histogram; its
inter-token latency is a mean per request), Triton's cumulative duration counters (means only).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from rightsizing.slo.attainment import SloDeclaration
from rightsizing.slo.latency import Histogram

from .schema import QueueEntry
from .workloads import Noise, Workload

SLICE_SECONDS = 10.0
WAIT_STEPS = 16  # spans of a wait's distribution, under a bucket bound (_after_wait)
_VLLM_E2E = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
             240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
_SGLANG_TTFT = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0,
                200.0, 400.0)  # fmt: skip
_TGI = tuple(0.0001 * 1.5**k for k in range(1, 36))  # 35 buckets from 0.00015 s, x1.5 each
LAYOUTS: Mapping[str, Mapping[str, tuple[float, ...]]] = {
    "vllm": {
        "ttft": (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0),
        "itl": (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0),
        "e2e": _VLLM_E2E,
        "queue": _VLLM_E2E,
    },
    "sglang": {
        "ttft": _SGLANG_TTFT,
        "itl": (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1,
                0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0),
        "e2e": (*_SGLANG_TTFT, 800.0),
        "queue": (*_SGLANG_TTFT, 800.0),
    },
    "tgi": {"itl": _TGI, "e2e": _TGI, "queue": _TGI},
    "triton": {"e2e": (), "queue": ()},  # cumulative duration counters: means only
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Moments:
    """Mean and variance of each kind at one time; ``per_token``: itl observations per request."""

    means: dict[str, float]
    variances: dict[str, float]


def _lognormal_shape(mean: float, variance: float) -> tuple[float, float] | None:
    """(mu, sigma x sqrt 2) of a lognormal of ``mean`` (> 0) and ``variance``; None: no spread."""
    s2 = math.log1p(variance / (mean * mean))
    if s2 <= 1e-12:
        return None
    return math.log(mean) - s2 / 2.0, math.sqrt(2.0 * s2)


def _lognormal_cdf(x: float, mean: float, variance: float) -> float:
    if x <= 0:
        return 0.0
    if mean <= 0:
        return 1.0
    shape = _lognormal_shape(mean, variance)
    if shape is None:
        return 1.0 if x >= mean else 0.0
    mu, scale = shape
    return 0.5 * (1.0 + math.erf((math.log(x) - mu) / scale))


def _exponential_cdf(x: float, mean: float) -> float:
    if x <= 0:
        return 0.0
    return 1.0 if mean <= 1e-12 else 1.0 - math.exp(-x / mean)


def _after_wait(x: float, wait: float, service: float, spread: float) -> float:
    """P(W + S <= x): an exponential wait W of mean ``wait``, then a lognormal service S of mean
    ``service`` and log-sigma ``spread``. W's mass on [0, x] is cut into WAIT_STEPS equal spans, each
    span's mass taken at its start (S's CDF at x - start): never more than W's own CDF at x, and, as
    a longer service is the same lognormal stretched, never less than that of a longer service.

    The same sums as ``_exponential_cdf`` and ``_lognormal_cdf`` give, term by term (identical
    floats), with the lognormal's shape computed once: this runs for every bound of every histogram
    of every simulated server, 16 spans each."""
    if x <= 0:
        return 0.0
    if service <= 0:  # _lognormal_cdf: every positive time serves it
        return _exponential_cdf(x, wait)
    shape = _lognormal_shape(service, math.expm1(spread * spread) * service * service)
    mu, scale = shape if shape is not None else (0.0, 0.0)  # no spread: served once x - start >= service
    flat = wait <= 1e-12
    total, upper = 0.0, _exponential_cdf(x, wait)
    log, erf, exp = math.log, math.erf, math.exp
    for k in reversed(range(WAIT_STEPS)):  # the longest waits first
        start = x * k / WAIT_STEPS
        lower = 0.0 if start <= 0 else 1.0 if flat else 1.0 - exp(-start / wait)
        if upper > lower:
            left = x - start
            if left <= 0:
                share = 0.0
            elif scale == 0.0:
                share = 1.0 if left >= service else 0.0
            else:
                share = 0.5 * (1.0 + erf((log(left) - mu) / scale))
            if share >= 1.0:  # served in time after this wait, so after every shorter one too
                return total + upper
            total += (upper - lower) * share
        upper = lower
    return total


class LatencyModel:
    """The cumulative histograms one simulated server publishes; ``at(elapsed)`` is a pure function
    of the time since its workload started (computed slice by slice, the latest slices cached)."""

    def __init__(self, workload: Workload, server: str, noise: Noise) -> None:
        self.w = workload
        self.server = server
        self.noise = noise
        self.layout = LAYOUTS.get(server, {})
        serving = workload.serving
        assert serving is not None
        generated, prompt, self.rate = serving.served
        self.tokens_out = max(1.0, generated / self.rate) if self.rate > 0 else 1.0
        self.tokens_in = prompt / self.rate if self.rate > 0 else 0.0
        self.prefill_share = min(0.9, prompt * serving.prefill_seconds_per_token)
        self.spread = workload.params.get("latency_spread", 0.25)
        # itl observations per request: vLLM and SGLang one per token after the first, TGI one mean.
        self.itl_per_request = 1.0 if server == "tgi" else max(0.0, self.tokens_out - 1.0)
        self._cache: tuple[int, dict[str, list[float]]] | None = None  # (slices done, sums)
        # The last answer: the queue collector and the right-sizing engine both read every queue at
        # the same time, each scrape (and each step of a history).
        self._last: tuple[float, dict[str, Histogram]] | None = None

    def moments(self, elapsed: float) -> Moments:
        p, serving = self.w.params, self.w.serving
        assert serving is not None
        depth, batch = self._depth_batch(elapsed)
        wait = depth / self.rate if self.rate > 0 else 0.0
        step = serving.step_seconds(batch)
        itl = step / (1.0 - self.prefill_share)
        prefill = self.tokens_in * serving.prefill_seconds_per_token + step
        decode = (self.tokens_out - 1.0) * itl
        k = math.expm1(self.spread * self.spread)  # lognormal variance / mean^2
        means = {"queue": wait, "ttft": wait + prefill, "itl": itl, "e2e": wait + prefill + decode}
        # TTFT and end to end are a wait then a service (``_after_wait``), not a lognormal each.
        variances = {"queue": wait * wait, "itl": k * itl * itl}
        del p
        return Moments(means, variances)

    def _depth_batch(self, elapsed: float) -> tuple[float, float]:
        """The queue's mean depth and the sequences in flight at ``elapsed`` (the workload's own
        profile without its per-second noise)."""
        p = self.w.params
        level = 1.0
        if "swing" in p:
            phase = 2 * math.pi * self.noise.fixed("phase", 0)
            level += p["swing"] * math.sin(2 * math.pi * elapsed / p["period_seconds"] + phase)
        depth = p.get("queue_depth", 0.0) + p.get("queue_growth_per_hour", 0.0) * elapsed / 3600.0
        return max(0.0, depth), p["batch"] * min(1.0, max(0.0, level))

    def _slice(self, elapsed: float, seconds: float, sums: dict[str, list[float]]) -> None:
        """Add ``seconds`` of requests at the state of ``elapsed`` into ``sums``."""
        m = self.moments(elapsed)
        wait = m.means["queue"]
        service = m.means["ttft"] - wait  # prefill + one step
        decode = m.means["e2e"] - m.means["ttft"]
        for kind, bounds in self.layout.items():
            n = self.rate * seconds * (self.itl_per_request if kind == "itl" else 1.0)
            mean, var = m.means[kind], m.variances.get(kind, 0.0)
            acc = sums[kind]
            for i, b in enumerate(bounds):
                if kind == "itl":
                    share = _lognormal_cdf(b, mean, var)
                elif kind == "queue":
                    share = _exponential_cdf(b, wait)
                else:  # a request's wait, then its service (and its decode): one request's sum
                    share = _after_wait(b, wait, service + (decode if kind == "e2e" else 0.0), self.spread)
                acc[i] += n * share
            acc[-2] += n
            acc[-1] += n * mean

    def at(self, elapsed: float) -> dict[str, Histogram] | None:
        """The server's cumulative histograms ``elapsed`` seconds after its workload started."""
        if elapsed < 0 or self.rate <= 0 or not self.layout:
            return None
        if self._last is not None and self._last[0] == elapsed:
            return dict(self._last[1])
        whole = math.floor(elapsed / SLICE_SECONDS)
        cache = self._cache
        if cache is None or cache[0] > whole:
            cache = (0, {k: [0.0] * (len(b) + 2) for k, b in self.layout.items()})
        done, sums = cache[0], {k: list(v) for k, v in cache[1].items()}
        while done < whole:
            self._slice((done + 0.5) * SLICE_SECONDS, SLICE_SECONDS, sums)
            done += 1
        self._cache = (done, {k: list(v) for k, v in sums.items()})
        part = elapsed - whole * SLICE_SECONDS
        if part > 0:
            self._slice(elapsed - part / 2.0, part, sums)
        out = {}
        for kind, bounds in self.layout.items():
            acc = sums[kind]
            count = float(math.floor(acc[-2] + 1e-9))
            counts = tuple(min(count, float(math.floor(c + 1e-9))) for c in acc[: len(bounds)])
            out[kind] = Histogram(bounds, (*counts, count), acc[-1])
        self._last = (elapsed, out)
        return dict(out)


def slo_of(q: QueueEntry) -> SloDeclaration:
    """The SLO a scenario's queue declares, for the workload its labels name (else the queue)."""
    assert q.slo is not None
    return SloDeclaration(
        namespace=q.labels.get("namespace"),
        workload=q.labels.get("workload"),
        queue=q.name,
        ttft_seconds=q.slo.ttft_seconds,
        itl_seconds=q.slo.itl_seconds,
        e2e_seconds=q.slo.e2e_seconds,
        queue_seconds=q.slo.queue_seconds,
        objective=q.slo.objective,
    )
