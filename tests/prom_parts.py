"""What a fake Prometheus answers to the source-state parts a rule's query carries (evidence.py).

The adapter appends its parts to a rule's own query as ``or label_replace(<part>, MARKER, "p<i>",
"", "")``, and asks the targets' parts in one evidence query of its own; ``carried`` finds which
parts a query carries and gives each the series ``provide``
returns for it (name: ``cur``, ``ts``, ``seen`` of a family, or a target part), marked as the
adapter expects. ``healthy`` provides one scrape target up and current publishing ``series``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from adapter.config import load_config
from adapter.promql import render
from adapter.rules import BUILTIN_RULES, RuleConfig
from adapter.sources.evidence import Horizon, rule_parts, target_parts
from adapter.sources.source_states import MARKER

NOW = 1700000000.5  # the evaluation time of the fake's answers (test_adapter_prometheus.vector)
TARGET = {"instance": "node-a:9400", "job": "rightsizer"}
Provide = Callable[[str, str], list[tuple[dict[str, str], str]]]  # (part name, family) -> series


def part_names(rules: Iterable[RuleConfig] = BUILTIN_RULES, **prometheus: Any) -> dict[str, tuple[str, str]]:
    """Every part text the rules render -> (part name, family; "" for the target parts)."""
    cfg = load_config(None, {"prometheus": {"url": "http://p:9090", **prometheus}}, environ={}).prometheus
    horizon = Horizon(cfg.source_horizon_seconds, cfg.stale_after_seconds)
    names = {text: (name, "") for name, text in target_parts(horizon).items()}
    for rule in rules:
        family = rule.states_family
        if family is not None:
            selector = render(f"{family}{{<<.LabelMatchers>>}}", rule.matchers)
            for problems in (None, []):  # every series timed; or none (every target up and current)
                for scraped in ((), (TARGET["job"],)):  # TARGET's job left out of the gone series, or not
                    found = rule_parts(rule, selector, horizon, problems, scraped)
                    names.update({text: (name, family) for name, text in found.items()})
    return names


def carried(query: str, provide: Provide, names: Mapping[str, tuple[str, str]] | None = None) -> list[Any]:
    """The marked series answering the parts ``query`` carries."""
    out = []
    for text, (name, family) in (names or part_names()).items():
        head = f'label_replace({text}, "{MARKER}", "p'
        at = query.find(head)
        if at < 0:
            continue
        index = query[at + len(head) :].split('"', 1)[0]
        out.extend(({**labels, MARKER: f"p{index}"}, value) for labels, value in provide(name, family))
    return out


def healthy(series: Mapping[str, list[dict[str, str]]], flag: str = "1") -> Provide:
    """One target, up and current, publishing ``series`` (family -> label sets) now."""

    def provide(name: str, family: str) -> list[tuple[dict[str, str], str]]:
        if name == "up":
            return [(TARGET, "1")]
        if name in ("up_at", "healthy_at"):
            return [(TARGET, str(NOW - 1))]
        if name == "frozen":
            return []
        if name == "jobs":
            held = len(series.get(family, []))
            return [(TARGET, str(held))] if held else []
        if name == "stamped":  # an exporter: it publishes its sample time
            return [(TARGET, "1")]
        if name == "scrapes":  # scraped for a while
            return [({"job": TARGET["job"]}, "120")]
        if name in ("why", "down"):  # no reason published (a flag that is down is "the source is
            return []  # down"); no target failing when the rule's query is evaluated
        value = {"cur": flag, "ts": str(NOW - 1), "seen": str(NOW - 1)}[name]
        return [({**labels, **TARGET}, value) for labels in series.get(family, [])]

    return provide
