"""``rightsizer report``: arguments, progress on a terminal, and the fleet view as table, JSON or CSV."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rightsizer_core.workloads import workload_of

from ..catalog import Catalog
from ..cost import cost_json
from ..figures import monthly
from . import report_slo
from .output import money, table, to_csv, to_json
from .output_file import OutputError, check_output, write_output
from .promapi import (
    PrometheusClient,
    ReportError,
    add_auth_arguments,
    auth_headers,
    credentials_of,
    parse_duration,
)
from .report import collect
from .report_assumptions import assumptions
from .report_common import HOURS_PER_MONTH, history_line, windows_line
from .report_patches import add_patch_arguments, patches, prepare_patches, write_patches
from .report_rows import as_rows
from .report_shards import DEFAULT_CONCURRENCY, DEFAULT_MAX_SERIES, ShardedClient

MAX_TIMEOUT_SECONDS = 86400

if TYPE_CHECKING:
    from .exporter_config import EngineSettings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--prometheus-url",
        required=True,
        metavar="URL",
        help="Prometheus, Thanos Query or Mimir (with its /prometheus prefix) base URL",
    )
    p.add_argument("--window", default="7d", help="history to judge, e.g. 7d, 24h, 90m (default 7d)")
    p.add_argument("--at", metavar="TIME", help="end of the window: Unix seconds or RFC 3339 (default now)")
    p.add_argument(
        "--idle-after",
        metavar="DURATION",
        help="idle when activity stayed low for this long, up to the window (default: the exporter's "
        "rightsizing.idle_after_seconds, 15 min, so idle GPUs show from the first hour)",
    )
    p.add_argument(
        "--resolution",
        metavar="DURATION",
        help="step of the subquery percentiles read (default: raw samples up to 1d, else window/10080)",
    )
    p.add_argument(
        "--view", choices=["gpus", "workloads"], default="gpus", help="CSV: which table (default gpus)"
    )
    p.add_argument(
        "--format",
        choices=["table", "json", "csv", "html", "markdown", "patches"],
        default="table",
        help="table (default), json, csv, html (one self-contained file with charts, to attach to a "
        "ticket), markdown (tables for a pull request) or patches (a folder of kustomize patches, one "
        "per workload to move, with a README: needs --output DIR)",
    )
    p.add_argument(
        "--output",
        metavar="FILE",
        help="write the report to FILE (a new file or a regular one, replaced whole) instead of "
        "standard output; - is standard output (--format patches: the folder DIR, made if missing)",
    )
    p.add_argument("--timeout", type=float, default=120.0, help="deadline per query in seconds (default 120)")
    add_auth_arguments(p, "Prometheus")
    add_patch_arguments(p)
    p.add_argument(
        "--max-series-per-query",
        type=int,
        default=DEFAULT_MAX_SERIES,
        metavar="N",
        help="split the queries by groups of exporters (instance) so that none answers more than N "
        f"series (default {DEFAULT_MAX_SERIES:,}; an exporter with more is queried alone)",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULT_CONCURRENCY,
        metavar="N",
        help=f"queries in flight at once when split (default {DEFAULT_CONCURRENCY})",
    )
    p.add_argument(
        "--progress", action="store_true", help="show progress on stderr even when it is not a terminal"
    )


def _at(text: str | None) -> float:
    if text is None:
        return time.time()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ReportError(f"--at {text!r} is neither Unix seconds nor an RFC 3339 time") from None


class Progress:
    """One self-overwriting line on stderr when it is a terminal; silent otherwise."""

    def __init__(self, forced: bool = False) -> None:
        self.tty = sys.stderr.isatty()
        self.forced = forced
        self.shown = -1

    def __call__(self, done: int, total: int, what: str) -> None:
        if self.tty:
            if what:
                sys.stderr.write(f"\r\033[Kquerying Prometheus [{done}/{total}] {what}")
            else:
                sys.stderr.write("\r\033[K")
            sys.stderr.flush()
        elif self.forced and what and total and (percent := 100 * done // total) // 10 != self.shown:
            # Not a terminal (a CI log): a line every tenth of the way, none overwritten.
            self.shown = percent // 10
            print(f"querying Prometheus [{done}/{total}] {percent} % {what}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace, catalog: Catalog, cfg: EngineSettings) -> int:
    try:
        manifests = prepare_patches(args) if args.format == "patches" else None
        if args.format != "patches":
            check_output(args.output)
        window = parse_duration(args.window, "--window")
        idle_after = (
            parse_duration(args.idle_after, "--idle-after")
            if args.idle_after
            else cfg.rightsizing.idle_after_seconds
        )
        # None: every raw sample up to a day of history, the history / 10,080 beyond (report.Collector)
        resolution = parse_duration(args.resolution, "--resolution") if args.resolution else None
        if not 0 < args.timeout <= MAX_TIMEOUT_SECONDS:  # inf and NaN included
            raise ReportError(f"--timeout must be positive and at most {MAX_TIMEOUT_SECONDS} seconds")
        if args.max_series_per_query < 1 or args.concurrency < 1:
            raise ReportError("--max-series-per-query and --concurrency must be at least 1")
        sent = auth_headers(args)
        client = PrometheusClient(args.prometheus_url, args.timeout, sent, credentials_of(args))
        at = _at(args.at)
        progress = Progress(args.progress)
        try:
            fleet = collect(
                client, at, window, idle_after, resolution, cfg.rightsizing, catalog, progress,
                args.max_series_per_query, args.concurrency,
            )  # fmt: skip
        finally:
            progress(0, 0, "")
        if args.format == "patches":
            write_patches(patches(args, fleet, client, catalog, cfg, manifests), args.output)
            return 0
        gpus = as_rows(fleet)
        costs = [{"instance": c.instance or None, **cost_json(c)} for c in fleet.costs]
        workloads = by_workload(gpus)
        totals = fleet_totals(gpus)
        totals["history_found_seconds"] = max((g["history_seconds"] for g in gpus), default=0)
        totals["live_window_seconds"] = cfg.rightsizing.window_seconds  # what the status pages judge
        document = {
            "prometheus_url": args.prometheus_url,
            "window": args.window,
            "window_seconds": window,
            "at": at,
            "totals": totals,
            "gpus": gpus,
            "workloads": workloads,
            "inference_costs": costs,
            "slos": report_slo.as_json(fleet.slos, cfg.rightsizing.slo_margin_ratio),
            "assumptions": assumptions(
                window_seconds=window, at=at, idle_after_seconds=idle_after,
                resolution_seconds=fleet.resolution,
                settings=cfg.rightsizing, catalog=catalog, rows=gpus,
                history_found_seconds=totals["history_found_seconds"], history_start=fleet.history_start,
                exporter_config=args.exporter_config,
            ),
        }  # fmt: skip
        if args.format == "json":
            text = to_json(document)
        elif args.format == "csv":
            rows = gpus if args.view == "gpus" else workloads
            headers = list(rows[0]) if rows else []
            text = to_csv(headers, [[_cell(r[h]) for h in headers] for r in rows])
        elif args.format in ("html", "markdown"):
            from .report_documents import document_text

            # The charts' range queries are split like the judgement's, by the same shards.
            charts_client = ShardedClient(client, fleet.shards, args.concurrency)
            try:
                shown = Progress(args.progress)
                text = document_text(args.format, document, charts_client, fleet.resolution, shown)
            finally:
                charts_client.close()
        else:
            text = render(args.window, at, totals, gpus, workloads, window, costs, document["slos"])
        write_output(text, args.output)
    except (ReportError, OutputError) as exc:
        print(f"rightsizer: {exc}", file=sys.stderr)
        return 2
    return 0


def _cell(v: Any) -> Any:
    return ";".join(v) if isinstance(v, list) else v


def by_workload(gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for g in gpus:
        key = (g["namespace"] or "", workload_of(g["pod"]) if g["pod"] else "(no pod)")
        groups.setdefault(key, []).append(g)
    out: list[dict[str, Any]] = []
    for (ns, wl), members in groups.items():
        verdicts = Counter(m["verdict"] for m in members)
        recommended = Counter(m["recommended"] for m in members)
        # A multi-GPU workload is moved as a whole ("4 x H100-SXM-80GB -> 2 x B200-SXM-180GB").
        change = next((m["workload_change"] for m in members if m["workload_change"]), None)
        out.append(
            {
                "namespace": ns or None,
                "workload": wl,
                "gpus": len(members),
                "verdicts": ", ".join(f"{n} {v}" for v, n in verdicts.most_common()),
                "recommended": change or ", ".join(f"{n} x {r}" for r, n in recommended.most_common()),
                "hourly_price_dollars": round(sum(m["hourly_price_dollars"] or 0.0 for m in members), 4),
                "hourly_savings_dollars": round(sum(m["hourly_savings_dollars"] or 0.0 for m in members), 4),
                "workload_change": change,
            }
        )
    out.sort(key=lambda r: (-r["hourly_savings_dollars"], -r["hourly_price_dollars"], r["workload"]))
    return out


def fleet_totals(gpus: list[dict[str, Any]]) -> dict[str, Any]:
    price = sum(g["hourly_price_dollars"] or 0.0 for g in gpus)
    savings = sum(g["hourly_savings_dollars"] for g in gpus if (g["hourly_savings_dollars"] or 0) > 0)
    upgrades = -sum(g["hourly_savings_dollars"] for g in gpus if (g["hourly_savings_dollars"] or 0) < 0)
    return {
        "gpus": len(gpus),
        "verdicts": dict(Counter(g["verdict"] for g in gpus)),
        "hourly_price_dollars": round(price, 4),
        "hourly_savings_dollars": round(savings, 4),
        "monthly_savings_dollars": round(savings * HOURS_PER_MONTH, 2),
        "hourly_upgrade_cost_dollars": round(upgrades, 4),
    }


def render(
    window: str,
    at: float,
    totals: dict[str, Any],
    gpus: list[dict[str, Any]],
    workloads: list[dict[str, Any]],
    window_seconds: float = 0.0,
    costs: list[dict[str, Any]] | None = None,
    slos: list[dict[str, Any]] | None = None,
) -> str:
    when = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC")
    head = (
        f"Fleet over the {window} to {when}: {totals['gpus']} GPUs costing "
        f"{money(totals['hourly_price_dollars'])}/h. "
        f"Right-sizing saves {money(totals['hourly_savings_dollars'])}/h "
        f"({monthly(totals['monthly_savings_dollars'])}/month)"
    )
    if totals["hourly_upgrade_cost_dollars"]:
        head += f"; upgrades for under-provisioned GPUs add {money(totals['hourly_upgrade_cost_dollars'])}/h"
    windows = windows_line(totals, window_seconds)
    out = [head + ".", history_line(totals, window_seconds), *([windows] if windows else []), ""]
    out.append(
        table(
            ["GPU", "host", "workload", "verdict", "recommended", "saves/h", "bottlenecks", "why"],
            [
                [
                    f"{g['gpu']} {g['model']}" + (f" {g['mig_profile']}" if g["mig_profile"] else ""),
                    g["host"],
                    f"{g['namespace']}/{g['pod']}" if g["pod"] else "-",
                    g["verdict"],
                    g["recommended"],
                    money(g["hourly_savings_dollars"]),
                    ",".join(g["bottlenecks"]) or "-",
                    g["summary"],
                ]
                for g in gpus
            ],
            [False, False, False, False, False, True, False, False],
        )
    )
    out += [
        "",
        table(
            ["namespace", "workload", "GPUs", "verdicts", "recommended", "costs/h", "saves/h"],
            [
                [
                    w["namespace"] or "-",
                    w["workload"],
                    str(w["gpus"]),
                    w["verdicts"],
                    w["recommended"],
                    money(w["hourly_price_dollars"]),
                    money(w["hourly_savings_dollars"]),
                ]
                for w in workloads
            ],
            [False, False, True, False, False, True, True],
        ),
    ]
    if costs:
        out += ["", "Cost per inference (measured throughput; most expensive per hour first):"]
        out.append(cost_table(costs))
    out += report_slo.text_lines(slos or [])
    out += ["", "Reasons:"]
    out += [f"  {g['gpu']} {g['uuid']}: {g['verdict']}: {g['reason']}" for g in gpus]
    return "\n".join(out) + "\n"


def cost_table(costs: list[dict[str, Any]]) -> str:
    """Per inference server: its GPUs' price, measured rate and cost, and both on the recommendation."""
    rows = []
    for c in costs:
        per = "M tokens" if c["unit"] == "tokens" else "k requests"
        key = "million_tokens" if c["unit"] == "tokens" else "thousand_requests"
        rate, projected = c["per_second"], c["projected_per_second"]
        rows.append([
            c["queue"], c["server"], str(c["gpus"]), money(c["hourly_dollars"]),
            f"{rate:,.1f} {c['unit']}/s",
            _per(c[f"dollars_per_{key}"], per),
            "-" if projected is None else f"{projected:,.1f} {c['unit']}/s",
            _per(c[f"projected_dollars_per_{key}"], per),
        ])  # fmt: skip
    headers = ["queue", "server", "GPUs", "costs/h", "measured", "cost now", "projected", "cost recommended"]
    return table(headers, rows, [False, False, True, True, True, True, True, True])


def _per(dollars: float | None, per: str) -> str:
    return "-" if dollars is None else f"{money(dollars, 3)}/{per}"
