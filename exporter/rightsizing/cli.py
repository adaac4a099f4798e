"""``rightsizer``: plan GPUs for a model (``plan``) and review a fleet from Prometheus (``report``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .. import __version__
from ..settings import ConfigError
from .catalog import Catalog, load_catalog
from .models import PlanError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rightsizer", description="GPU right-sizing from measurement.")
    p.add_argument("--version", action="version", version=f"rightsizer {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="{plan,report}")
    from . import plan_cli, report_cli

    plan = sub.add_parser(
        "plan",
        help="memory, viable GPUs and cost per token for a model and workload",
        description="Requirements to candidates: the memory a model needs, the catalog "
        "GPUs that hold it, and throughput ceilings and cost per million tokens.",
    )
    plan_cli.add_arguments(plan)
    report = sub.add_parser(
        "report",
        help="fleet verdicts, recommendations and savings from Prometheus",
        description="The fleet view from Prometheus history of the exporter's metrics "
        "(Prometheus, Thanos or Mimir query API).",
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
    from ..config import ExporterConfig, load_config

    try:
        cfg = load_config(args.exporter_config, {}, environ={}) if args.exporter_config else ExporterConfig()
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
