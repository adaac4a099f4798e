"""Prometheus mode: which exporters a rule's values come from, and whether each is up and current.

Once per refresh the evidence query (``target_parts``, shared by every rule) asks, per scrape
target: ``up``, the time of its last scrape (``timestamp(up)``), the time of its last good scrape
within the horizon H, as the last step of a subquery over H every R = H/60 whose window of R
holds an ``up`` of 1 (``last_good_step``), whether its exporter is frozen
(``rightsizer_last_sample_timestamp_seconds`` sampled at least twice in the last ``stale_after``
seconds without changing) and whether it publishes that stamp now (an
exporter); per job, how many times its most scraped target was scraped in the last 2 x
``stale_after``. A rule with a source family F (``up_family`` or ``source_family``) then asks,
inside its own query, vectors of F per (key labels, ``instance``, ``job``) (``rule_parts``), at the
engine's clock, of what can change an answer only:

- ``cur``: F now (the flag of an ``up_family``), honouring staleness markers; where the values
  stand for the UP states (``up_from_values``) only the series of the targets that are not up and
  current (``problem_instances``), none while every target is;
- ``ts``: the series whose sample is older than ``stale_after``, of the jobs that are not scraped
  (imported, remote-written or federated data); ``jobs`` (a rule without a flag): which targets
  publish F (a rule with a flag reads which jobs do from its ``cur``, every series of F);
- ``why`` (a rule with a ``why_family``): the reasons (``reason`` label) of the flags not 1 now,
  quoted by the 503 of their key;
- ``down``: the targets whose ``up`` is not 1 at the rule's query (``failed_since``): a target up
  in the evidence that failed before the rule's query was evaluated (its series ended at once, by
  staleness markers) is judged failing; a rule without a flag asks again for what it held
  (``late_parts``), its series having been left out of the rule's query;
- ``seen``: the series seen within H but not now (``present_over_time(F[H]) unless F``, at 0),
  and when each series of a target that is not current was last seen
  (the last step of the same grid whose window holds a sample of it, ``last_step``); past
  ``MAX_TIMED_TARGETS`` such targets, every series is timed. For a rule without a flag the
  untimed vector leaves out the scraped jobs (``job!~...``) but those whose series ``jobs`` found
  under an instance they do not scrape: a series a target up and current no longer publishes
  gives no state there.

From them ``classify`` gives each series a state (``sources/__init__.py``): UP from a target that
is up and current; TAINTED when a value of it is still selected although its target is not
current (the last scrape failed, the target was not scraped since the engine restarted, the
exporter is frozen, or the sample is older than ``stale_after``); STALE for a series its target
held at its last good scrape (seen at that scrape's last step) before the target went down or away, so
a node whose exporter vanished is missed rather than dropped, while a pod that left a healthy
node (or a node drained before it was removed) is not (a STALE state of a target that left
service discovery, or of a flag its healthy exporter stopped publishing, is marked GONE); DOWN for
a queue whose flag is 0. ``unreached`` names the
targets of the family's jobs that were never scraped successfully within the horizon.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from ..giveway import EVERY, give_way
from ..rules import RuleConfig
from ..vectors import Series
from . import DOWN, GONE, STALE, TAINTED, UNKNOWN, UP, reasons, state
from .pace import STAMP_FAMILY

# The scrape targets failing when a rule's own query is evaluated, asked inside it: a target the
# evidence query found up may fail before then (its series gone at once, by staleness markers)
DOWN_NOW = "max by (instance, job) (up != 1)"
MAX_TIMED_TARGETS = 64  # targets not current whose series are timed alone; past it, every series
STEPS = 60  # subquery steps over the horizon: when a series was last seen, to H/60
Labels = frozenset[tuple[str, str]]


@dataclass(frozen=True)
class Horizon:
    seconds: float  # H: how far back a source that held a series still counts
    stale_after: float  # a sample or a scrape older than this is not current

    @property
    def range(self) -> str:
        return f"[{int(self.seconds)}s:{max(1, int(self.seconds / STEPS))}s]"

    @property
    def resolution(self) -> float:
        return max(1.0, float(int(self.seconds / STEPS)))


def _group(rule: RuleConfig, expr: str) -> str:
    by, _ = rule.key_labels
    return f"max by ({', '.join(dict.fromkeys([*by, 'instance', 'job']))}) ({expr})" if by else expr


def _regex_literal(text: str) -> str:
    """``text`` as an RE2 pattern matching itself alone."""
    return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", text)


def up_from_values(rule: RuleConfig) -> bool:
    """Whether ``rule``'s UP states are left out, its values' keys standing for them: rules with a
    ``source_family`` (the GPU rules: one state per key would cost as much as the values). Rules
    with an ``up_family`` keep every state: its flag tells a queue that is up but publishes nothing;
    so do rules with ``every_source``."""
    return rule.source_family is not None and rule.up_family is None and not rule.every_source


def rule_parts(
    rule: RuleConfig,
    selector: str,
    horizon: Horizon,
    problems: Sequence[str] | None = None,
    scraped: Collection[str] = (),
) -> dict[str, str]:
    """``cur``, ``ts``, ``seen`` queries of a rule whose rendered family selector is ``selector``.

    ``problems``: the instances of the targets that are not up and current (from the refresh's
    evidence query); only their series need the time they were last seen, a subquery restricted to
    them. The others' series seen within the horizon but not now come without a time (0), from one
    range read. None (too many, or not known): the time of every series, the full subquery.
    Where the values stand for the UP states (``up_from_values``), ``cur`` holds only the series of
    those targets (none at all while every target is up and current).

    ``scraped``: jobs whose every series belongs to a scrape target the evidence knows (no series
    of them was found under an (``instance``, ``job``) that is no scrape target: ``foreign_jobs``
    of a previous answer). ``ts`` leaves them out, for every rule: their samples carry their
    scrape's time. For a rule without a flag the series seen but not now of an up and current
    target give no state (``classify``), so ``seen`` leaves those jobs out too (but for the targets
    in ``problems``) and reads an hour of the series of the other jobs only: imported,
    remote-written or federated data. A rule with a flag reads every job's in ``seen``: a flag its
    healthy exporter stopped publishing is a state (GONE)."""
    mine = scraped if rule.up_family is None else ()
    # A sample of a target that is up and current carries that scrape's time (exporters write no
    # timestamps), and a target that is not current taints its series whatever their age: only the
    # other jobs' samples (imported, remote-written, federated) can be old while their source looks
    # current, so ``ts`` leaves the scraped jobs out, a flag's as well (docs/fleet-scale.md).
    own = _excluded(selector, scraped) if scraped else selector
    parts = {
        "cur": _current(rule, selector, problems),
        # per target: where the gone series may be left out (``foreign_jobs``), and which jobs
        # publish the family (``unreached``). A rule with a flag needs no such part: its ``cur``
        # holds every series of the family with its ``instance`` and ``job`` (the source's
        # ``_sort_out`` reads the jobs from it), and reading the family once more cost the engine
        # about a tenth of a queue rule's parts at 40,000 GPUs (docs/fleet-scale.md)
        "jobs": f"count by (instance, job) ({selector})" if rule.up_family is None else None,
        # only the samples older than stale_after come back (filtered before they are grouped, which
        # is what costs the engine): a key whose exporter has one such sample is not current
        "ts": _group(rule, f"timestamp({own}) < (time() - {horizon.stale_after:g})"),
        "seen": _seen(rule, selector, horizon, problems, mine),
    }
    if rule.why_family is not None and rule.up_family is not None:
        parts["why"] = _why(rule, selector)
    parts["down"] = DOWN_NOW
    return {name: text for name, text in parts.items() if text is not None}


def late_parts(rule: RuleConfig, selector: str, horizon: Horizon, instances: Sequence[str]) -> dict[str, str]:
    """The parts a rule without a flag asks again for ``instances``, targets that were up and
    current in the refresh's evidence but failed before the rule's own query was evaluated
    (``failed_since``): that query left their series out (``cur`` and ``seen`` ask only the
    targets the evidence found failing), and the values no longer hold them. ``cur``: their series
    still selected; ``seen``: when each of their series was last seen (0, unknown, for a series on
    none of the subquery's steps: its target was first scraped after the last step); ``down``: their
    ``up`` now."""
    only = _restricted(selector, instances)
    # a target first scraped after the subquery's last step is on none of its steps: what it held
    # is seen at 0 (unknown), as in ``_seen`` when every series is timed
    timed = _group(rule, last_step(only, horizon))
    untimed = _group(rule, f"present_over_time({only}[{int(horizon.seconds)}s]) * 0")
    return {"cur": _group(rule, only), "seen": f"{timed} or {untimed}", "down": DOWN_NOW}


def _why(rule: RuleConfig, selector: str) -> str:
    """``why``: the series of the rule's ``why_family`` (their ``reason``) whose flag is not 1 now,
    per (key labels, ``instance``, ``job``): as many as the flags that are down, at most."""
    assert rule.why_family is not None
    by, _ = rule.key_labels
    if not by:  # keyed on every label of the flag: the reason's series carry the same ones
        return f"{rule.why_family} and ignoring (reason) ({selector} != 1)"
    keep = ", ".join(dict.fromkeys([*by, "instance", "job"]))
    return f"max by ({keep}, reason) ({rule.why_family}) and on ({keep}) ({selector} != 1)"


def _current(rule: RuleConfig, selector: str, problems: Sequence[str] | None) -> str | None:
    """``cur``; None where it would hold nothing: a rule whose values stand for its UP states needs
    only the series of the targets that are not current (a key another exporter that is up also
    publishes has a value, which stands for that exporter)."""
    every = _group(rule, selector)
    if not up_from_values(rule) or problems is None:
        return every
    return _group(rule, _restricted(selector, problems)) if problems else None


def _restricted(selector: str, instances: Sequence[str]) -> str:
    pattern = "|".join(_regex_literal(i) for i in sorted(set(instances)))
    return _with_matcher(selector, f"instance=~{json.dumps(pattern)}")


def _seen(
    rule: RuleConfig, selector: str, horizon: Horizon, problems: Sequence[str] | None,
    scraped: Collection[str],
) -> str:
    # the grid misses what was sampled only after its last step (a target just scraped): seen at 0 (unknown)
    untimed = _group(rule, f"present_over_time({selector}[{int(horizon.seconds)}s]) * 0")
    if problems is None:
        return f"{_group(rule, last_step(selector, horizon))} or {untimed}"
    gone = [_gone(rule, _excluded(selector, scraped) if scraped else selector, horizon)]
    if not problems:
        return gone[0]
    only = _restricted(selector, problems)
    if scraped:  # the jobs left out above: their targets that are not current are asked here
        gone.insert(0, _gone(rule, only, horizon))
    return " or ".join([_group(rule, last_step(only, horizon)), *gone])


def last_step(selector: str, horizon: Horizon) -> str:
    """The last step of the horizon's subquery grid (every R = ``horizon.resolution`` seconds,
    aligned to multiples of it) whose window of R seconds before it holds a sample of ``selector``
    (``last_good_step``: a good scrape), that step's time; none for a series with no sample
    within the horizon. So the last step is the first at or after the series' last sample: what
    ``classify`` compares, a series' last step against its target's last good scrape's
    (``healthy_at``), is on one grid, and a series its target held at its last good scrape ends at
    that scrape's step, one that left a scrape or more before at an earlier step or the same (held,
    then: unknown rather than left out). Range windows, not the engine's lookback: no staleness
    marker or lookback delta moves a step, whatever the scrape interval.

    Step times, not each sample's own (``timestamp()``): inside a subquery ``timestamp()`` costs
    Prometheus 2.42 about ten times as much (5,000 targets' ``up`` over an hour: 790 to 1,040 ms;
    docs/fleet-scale.md). ``present_over_time`` counts a NaN sample too."""
    window = f"[{int(horizon.resolution)}s]"
    return f"max_over_time((present_over_time({selector}{window}) * time()){horizon.range})"


def last_good_step(horizon: Horizon) -> str:
    """Per target, ``last_step`` of its good scrapes: the last step whose window holds an ``up`` of 1."""
    window = f"[{int(horizon.resolution)}s]"
    good = f"(max_over_time(up{window}) == 1) * time()"
    return f"max by (instance, job) (max_over_time(({good}){horizon.range}))"


def _gone(rule: RuleConfig, selector: str, horizon: Horizon) -> str:
    """The series of ``selector`` seen within the horizon but not now, at 0 (not timed)."""
    window = f"[{int(horizon.seconds)}s]"
    return f"({_group(rule, f'present_over_time({selector}{window}) unless {selector}')}) * 0"


def _excluded(selector: str, jobs: Collection[str]) -> str:
    pattern = "|".join(_regex_literal(j) for j in sorted(set(jobs)))
    return _with_matcher(selector, f"job!~{json.dumps(pattern)}")


def _with_matcher(selector: str, matcher: str) -> str:
    """``family{a="b"}`` with one more matcher."""
    head, _, rest = selector.partition("{")
    inner = rest[:-1] if rest.endswith("}") else rest
    return f"{head}{{{inner},{matcher}}}" if inner.strip() else f"{head}{{{matcher}}}"


def target_parts(horizon: Horizon) -> dict[str, str]:
    """The six per-target (and per-job) queries every rule with a source family shares."""
    window = f"[{int(max(1, horizon.stale_after))}s]"
    frozen = (
        f"count_over_time({STAMP_FAMILY}{window}) >= 2 unless changes({STAMP_FAMILY}{window}) > 0"
    )
    return {
        "up": "max by (instance, job) (up)",
        "up_at": "max by (instance, job) (timestamp(up))",
        "healthy_at": last_good_step(horizon),
        "frozen": f"max by (instance, job) ({frozen})",
        "stamped": f"max by (instance, job) ({STAMP_FAMILY} * 0 + 1)",  # an exporter, answering now
        "scrapes": f"max by (job) (count_over_time(up[{int(max(1, 2 * horizon.stale_after))}s]))",
    }


@dataclass
class Target:
    up: float | None = None
    up_at: float | None = None
    healthy_at: float | None = None
    frozen: bool = False
    stamped: bool = False  # publishes rightsizer_last_sample_timestamp_seconds now: an exporter

    def problem(self, now: float, horizon: Horizon) -> str:
        """"" when up and current, else why not."""
        if self.up is None or self.up_at is None:
            return "its target is no longer scraped (gone from service discovery, or not yet scraped)"
        if now - self.up_at > horizon.stale_after:
            return (
                f"its target was last scraped more than {horizon.stale_after:g}s ago "
                "(the engine restarted, or its scrapes stopped)"
            )
        if self.up != 1:
            return "its last scrape failed (up 0)"
        if self.frozen:
            return (
                f"its exporter is frozen: {STAMP_FAMILY} has not moved in {horizon.stale_after:g}s "
                "of scrapes"
            )
        return ""


def _target_key(labels: Mapping[str, str]) -> tuple[str, str]:
    return labels.get("instance", ""), labels.get("job", "")


def targets(parts: Mapping[str, Sequence[Series]]) -> dict[tuple[str, str], Target]:
    out: dict[tuple[str, str], Target] = {}
    for name in ("up", "up_at", "healthy_at", "frozen", "stamped"):
        for s in parts.get(name, ()):
            key = _target_key(s.labels)
            if name == "stamped":  # marks a scraped target; imported data has no target at all
                if key in out:
                    out[key].stamped = True
                continue
            t = out.setdefault(key, Target())
            if name == "frozen":
                t.frozen = True
            else:
                setattr(t, name, s.value)
    return out


@dataclass(frozen=True)
class Evidence:
    """A refresh's evidence answer, read once for every rule needing it (in a worker thread at fleet
    scale: thousands of targets, tens of ms each time it is read): each part's series (part name ->
    its series), its evaluation time, the targets they tell of, the instances of those not up and
    current at that time (``problem_instances``) and the jobs with scrape targets. Shared by every
    rule's query: read, never changed."""

    parts: dict[str, list[Series]]
    at: float
    known: dict[tuple[str, str], Target]
    problems: list[str] | None
    scraped: set[str]


def read_evidence(parts: dict[str, list[Series]], at: float, horizon: Horizon) -> Evidence:
    """The evidence answer's ``parts``, evaluated at ``at``, with what every rule reads of them."""
    known = targets(parts)
    return Evidence(parts, at, known, problem_instances(known, at, horizon), scraped_jobs(known))


def failed_since(
    known: Mapping[tuple[str, str], Target], parts: Mapping[str, Sequence[Series]]
) -> dict[tuple[str, str], Target]:
    """The targets that were up in the evidence (``known``) and whose ``up`` is not 1 when the
    rule's own query was evaluated (its ``down`` part), as that query found them."""
    out = {}
    for s in parts.get("down", ()):
        key = _target_key(s.labels)
        target = known.get(key)
        if target is not None and target.up == 1:
            out[key] = replace(target, up=s.value)
    return out


def problem_instances(
    known: Mapping[tuple[str, str], Target], now: float, horizon: Horizon
) -> list[str] | None:
    """The instances of the targets that are not up and current at ``now``; None past
    ``MAX_TIMED_TARGETS`` (the rules then ask when every series was last seen)."""
    found = sorted({instance for (instance, _), t in known.items() if t.problem(now, horizon)})
    return found if len(found) <= MAX_TIMED_TARGETS else None


def scraped_jobs(known: Mapping[tuple[str, str], Target]) -> set[str]:
    """The jobs with scrape targets: an ``up`` now or a good scrape within the horizon."""
    return {job for (_, job), t in known.items() if t.up is not None or t.healthy_at is not None}


def foreign_jobs(parts: Mapping[str, Sequence[Series]], known: Mapping[tuple[str, str], Target]) -> set[str]:
    """The jobs of a rule's ``jobs`` part (per target; a flag's: its every series now) publishing
    the family now under an (``instance``, ``job``) that is no scrape target: federated with
    ``honor_labels`` into a job of the same name, or an ``instance`` relabelled. Their old samples
    (and, for a rule without a flag, their gone series) are asked from then on."""
    out = set()
    for s in parts.get("jobs", ()):
        target = known.get(_target_key(s.labels))
        if target is None or (target.up is None and target.healthy_at is None):
            out.add(s.labels.get("job", ""))
    return out


def _labels(s: Series) -> Labels:
    return frozenset(s.labels.items())


def in_order(labelsets: Collection[Labels]) -> list[Labels]:
    """``sorted(labelsets, key=sorted)``, in steps the interpreter can switch threads between.

    That call is one C call: for a queue rule's 35,000 label sets it held the interpreter lock for
    about 130 ms while the event loop waited to answer requests. Each set's sorted pairs joined
    by NUL compare as the pairs do when no label holds a NUL (a name or value that is a prefix of
    another sorts first, as NUL sorts before every other character); they are built one set at a
    time, and sorting strings is about 7 ms for as many. Any label holding a NUL: the call itself."""
    keyed = []
    for read, labels in enumerate(labelsets, 1):
        if not read % EVERY:
            give_way()
        flat = "\0".join([text for pair in sorted(labels) for text in pair])
        if flat.count("\0") != max(2 * len(labels) - 1, 0):  # a NUL of its own: the joined order may differ
            return sorted(labelsets, key=sorted)
        keyed.append((flat, labels))
    keyed.sort(key=_first)
    return [labels for _, labels in keyed]


def _first(pair: tuple[str, Labels]) -> str:
    return pair[0]


def classify(
    rule: RuleConfig,
    parts: Mapping[str, Sequence[Series]],
    known: Mapping[tuple[str, str], Target],
    now: float,
    horizon: Horizon,
) -> list[Series]:
    """The source states of ``rule`` from its parts (``cur``, ``ts``, ``seen``, ``down``) at engine
    time ``now``. A target the evidence found up whose ``up`` is not 1 in the rule's own query
    failed in between: its series are judged by that (a series its last good scrape held and no
    longer selected is STALE, not a series its exporter stopped publishing while up)."""
    known = {**known, **failed_since(known, parts)}
    cur = {_labels(s): s.value for s in parts.get("cur", ())}
    ts = {_labels(s): s.value for s in parts.get("ts", ())}
    seen = {_labels(s): s.value for s in parts.get("seen", ())}
    flag = rule.up_family
    why_down = reasons(rule, parts.get("why", ()), ("instance", "job"))  # the rule's why_family
    out = []
    for read, labels in enumerate(in_order({*cur, *ts, *seen}), 1):  # one order on every replica
        if not read % EVERY:
            give_way()
        as_dict = dict(labels)
        key = rule.key_of(as_dict)
        instance, job = _target_key(as_dict)
        source = f"{instance} (job {job})" if job else instance or "an unnamed source"
        target = known.get((instance, job))
        problem = target.problem(now, horizon) if target is not None else ""
        value, at = cur.get(labels), ts.get(labels)
        if at is not None and now - at > horizon.stale_after:
            problem = problem or f"its last sample is older than {horizon.stale_after:g}s"
            value = 1.0 if value is None else value  # a sample is still selected: its ``cur`` may be left out
        if value is not None:
            if problem:  # its last value is still selected by the values' query
                out.append(state(key, source, TAINTED, f"{source}: {problem}"))
            elif flag is not None and value != 1:
                reason = why_down.get((frozenset(key.items()), (instance, job))) or "the source is down"
                out.append(state(key, source, DOWN, f"{flag} is {value:g} ({reason})"))
            else:
                out.append(state(key, source, UP))
            continue
        last = seen.get(labels)
        if target is None:  # no `up` for it (imported, remote-written or federated data)
            out.append(state(key, source, STALE, f"{source}: no current sample of it"))
        elif problem:
            good = target.healthy_at  # held at its last good scrape (0: not on the grid, so maybe)
            if good is None or not last or last >= good - horizon.resolution / 2:
                stale = state(key, source, STALE, f"{source}: {problem}")
                if target.up is None:  # left service discovery (see GONE)
                    stale = Series({**stale.labels, GONE: "1"}, stale.value)
                out.append(stale)
        elif flag is not None:  # a queue its exporter, up and current, stopped publishing
            left = state(key, source, STALE, f"{source} is up but no longer publishes it")
            out.append(Series({**left.labels, GONE: "1"}, left.value))  # it holds no part of it now
    return out


def unreached(
    rule: RuleConfig,
    parts: Mapping[str, Sequence[Series]],
    known: Mapping[tuple[str, str], Target],
    horizon: Horizon,
) -> list[Series]:
    """UNKNOWN states (no key) for the targets of exporter jobs publishing ``rule``'s family
    (every target of the job answering now is an exporter: a catch-all job of every annotated pod
    is not one) that are scraped, failing, had no good scrape within the horizon (on its grid) and
    published none of the family within it: they might publish anything, so
    (as an exporter never reached in direct mode) every request fails until they answer.

    Likewise for a job the engine began scraping moments ago (its most scraped target scraped
    fewer than 3 times in 2 x ``stale_after``, at least 4 times once settled since the scrape
    interval must stay under ``stale_after`` / 2): a target of it may not be scraped yet, and a
    target never scraped has no ``up`` at all, so nothing else can tell it is missing."""
    known = {**known, **failed_since(known, parts)}
    held = {_target_key(s.labels) for name in ("cur", "seen") for s in parts.get(name, ())}
    answering = [(job, t.stamped) for (_, job), t in known.items() if t.up == 1]
    # the jobs publishing the family: its own part (``cur`` and ``seen`` may hold only the series
    # of targets that are not current), and those of the series held
    publishing = {s.labels.get("job", "") for s in parts.get("jobs", ())} | {job for _, job in held}
    jobs = publishing - {job for job, stamped in answering if not stamped}
    scrapes = {s.labels.get("job", ""): s.value for s in parts.get("scrapes", ())}
    window = int(max(1, 2 * horizon.stale_after))
    out = []
    # jobs with no `up` at all hold imported or remote-written data: nothing is scraped there
    for job in sorted(jobs & scraped_jobs(known)):
        if scrapes.get(job, 0.0) < 3:
            why = (
                f"the engine has scraped job {job} only {scrapes.get(job, 0.0):g} times in {window}s: "
                "a target of it may not have been scraped yet"
            )
            out.append(Series({UNKNOWN: why}, TAINTED))
    for (instance, job), target in sorted(known.items()):
        failing = target.up is not None and target.up != 1 and target.healthy_at is None
        if failing and job in jobs and (instance, job) not in held:
            why = (
                f"{instance} (job {job}) has not been scraped successfully within the source horizon, "
                f"so what it publishes of {rule.states_family} is unknown"
            )
            out.append(Series({UNKNOWN: why}, TAINTED))
    return out
