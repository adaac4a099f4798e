"""``rightsizer``: plan GPUs for a model (``plan``) and review a fleet from Prometheus (``report``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rightsizer_core import __version__
from rightsizer_core.argparsing import Parser, epilog
from rightsizer_core.settings import ConfigError

from ..catalog import Catalog, load_catalog
from ..models import PlanError
from .exporter_config import read_exporter_config

_EXIT_INTERRUPTED = ("130", "interrupted (Ctrl-C)")

_MAIN_EPILOG = epilog(
    [
        (
            "which GPU a 70B model in bf16 needs for 8 sequences of 8k tokens",
            "rightsizer plan --model llama-3-70b --batch 8 --context 8192",
        ),
        (
            "the fleet's verdicts and savings over the last week, from Prometheus",
            "rightsizer report --prometheus-url http://localhost:9090",
        ),
        ("the options of a command", "rightsizer plan --help"),
    ],
    [],
    [
        ("0", "done"),
        ("2", "bad flags or input, nothing fits (plan), Prometheus unreachable or empty (report)"),
        _EXIT_INTERRUPTED,
    ],
)

_PLAN_EPILOG = epilog(
    [
        ("a model by parameter count, default bf16 inference, 4k context", "rightsizer plan --params 7B"),
        (
            "a built-in architecture, 16 sequences of 32k tokens, as JSON",
            "rightsizer plan --model llama-3.1-8b --batch 16 --context 32768 --format json",
        ),
        (
            "a Hugging Face model directory on disk (never downloaded)",
            "rightsizer plan --config ./Mistral-7B-v0.1",
        ),
        (
            "full fine-tuning with AdamW (mixed precision) on 2 GPUs",
            "rightsizer plan --model llama-3-8b --mode training --gpus 2",
        ),
        (
            "prices from your exporter configuration",
            "rightsizer plan --params 13B --exporter-config exporter.yaml",
        ),
    ],
    [],
    [
        ("0", "the plan is printed and at least one GPU option holds the workload"),
        ("2", "no catalog GPU holds it (the reason on stderr), bad flags or input, or no measurement"),
        _EXIT_INTERRUPTED,
    ],
)

_REPORT_EPILOG = epilog(
    [
        (
            "the last 7 days of the exporter's metrics",
            "rightsizer report --prometheus-url http://localhost:9090",
        ),
        (
            "one day ending at a given time, per workload, as CSV",
            "rightsizer report --prometheus-url http://localhost:9090 --window 24h "
            "--at 2026-11-01T00:00:00Z --format csv --view workloads",
        ),
        (
            "a self-contained HTML file with charts to attach to a ticket (markdown: for a pull request)",
            "rightsizer report --prometheus-url http://localhost:9090 --format html --output report.html",
        ),
        (
            "Mimir, one tenant",
            "rightsizer report --prometheus-url http://mimir/prometheus --header 'X-Scope-OrgID: team-a'",
        ),
        (
            "thresholds and prices of your exporter configuration",
            "rightsizer report --prometheus-url http://localhost:9090 --exporter-config exporter.yaml",
        ),
    ],
    [],
    [
        ("0", "the report is printed"),
        ("2", "bad flags, Prometheus unreachable or not the query API, or no GPU series in the window"),
        _EXIT_INTERRUPTED,
    ],
)


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="rightsizer", description="GPU right-sizing from measurement.", epilog=_MAIN_EPILOG)
    p.add_argument("--version", action="version", version=f"rightsizer {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="{plan,report}")
    from . import plan_cli, report_cli

    plan = sub.add_parser(
        "plan",
        help="memory, viable GPUs and cost per token for a model and workload",
        description="Requirements to candidates: the memory a model needs, the catalog "
        "GPUs that hold it, and throughput ceilings and cost per million tokens.",
        epilog=_PLAN_EPILOG,
    )
    plan_cli.add_arguments(plan)
    report = sub.add_parser(
        "report",
        help="fleet verdicts, recommendations and savings from Prometheus",
        description="The fleet view from Prometheus history of the exporter's metrics "
        "(Prometheus, Thanos or Mimir query API).",
        epilog=_REPORT_EPILOG,
    )
    report_cli.add_arguments(report)
    for sp in (plan, report):
        sp.add_argument(
            "--exporter-config",
            metavar="FILE",
            help="exporter YAML config: its catalog section (prices, extra GPUs) and, for "
            "report, its rightsizing thresholds",
        )
    return p


def fail(message: str) -> int:
    print(f"rightsizer: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        cfg = read_exporter_config(args.exporter_config)
        catalog: Catalog = load_catalog(cfg.catalog)
    except ConfigError as exc:
        return fail(str(exc))
    try:
        if args.command == "plan":
            from .plan_cli import main as run_plan

            return run_plan(args, catalog)
        from .report_cli import run as run_report

        return run_report(args, catalog, cfg)
    except (PlanError, ConfigError) as exc:
        return fail(str(exc))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
