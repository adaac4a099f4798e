"""``rightsizer-exporter``: the per-node exporter."""

from __future__ import annotations

import argparse
import asyncio
import errno
import gc
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from aiohttp import web

from rightsizer_core.argparsing import Parser, epilog
from rightsizer_core.heap import one_malloc_arena, release_free_heap
from rightsizer_core.listen import parse_listen
from rightsizer_core.listener import ListenerStats, start_listener
from rightsizer_core.logs import configure, event
from rightsizer_core.settings import ConfigError, unknown_env, unknown_env_line
from rightsizer_core.stopping import (
    SHUTDOWN_DEADLINE,
    SHUTDOWN_REQUEST_GRACE,
    Stopped,
    exiting_on_stop_signals,
    stop_event,
    unless_stopped,
)

from . import __version__
from .config import ExporterConfig, load_config
from .families import resolve as resolve_families
from .listener_metrics import ListenerMetrics
from .render import Renderer
from .sampler import Extension, Sampler
from .server import create_app
from .sources.base import GpuSource, SourceUnavailable

if TYPE_CHECKING:
    from .rightsizing_live.slo_match import Unmatched

log = logging.getLogger("rightsizer.exporter")


def _builtin_scenarios() -> str:
    """The built-in scenarios and what each shows (their files' ``description``), for --help."""
    import yaml

    from .sources.simulated.scenario import SCENARIO_DIR, builtin_names

    lines = ["built-in scenarios (--simulate NAME):"]
    for name in builtin_names():
        try:
            about = yaml.safe_load((SCENARIO_DIR / f"{name}.yaml").read_text()).get("description", "")
        except (OSError, yaml.YAMLError, AttributeError):
            about = ""
        lines.append(f"  {name:<10} {about}")
    return "\n".join(lines)


def _epilog() -> str:
    return epilog(
        [
            (
                "a simulated 8-GPU fleet, no GPU needed; then open http://localhost:9430/",
                "rightsizer-exporter --simulate",
            ),
            ("the real GPUs of this node, through NVML", "rightsizer-exporter"),
            (
                "another built-in scenario, on loopback only",
                "rightsizer-exporter --simulate mig --listen 127.0.0.1:9430",
            ),
            (
                "check a configuration file and exit",
                "rightsizer-exporter --config exporter.yaml --check-config",
            ),
        ],
        [
            (
                "RIGHTSIZER_<KEY>",
                "any scalar setting, e.g. RIGHTSIZER_INTERVAL=5, RIGHTSIZER_PODS_ENABLED=false",
            ),
            ("", "(nested keys joined by _; flags win over the environment, which wins over --config)"),
            ("NODE_NAME", "default of the Hostname label (set by a DaemonSet's downward API)"),
        ],
        [
            ("0", "stopped by SIGTERM or SIGINT, or --check-config found nothing wrong"),
            ("2", "bad flags or configuration (every problem printed, one a line), no NVML, address in use"),
        ],
        _builtin_scenarios(),
    )


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="rightsizer-exporter",
        description="Per-node GPU exporter: dcgm-exporter-compatible metrics plus right-sizing scores, "
        "and a status page at / with the verdicts and savings.",
        epilog_factory=_epilog,
    )
    p.add_argument(
        "--simulate",
        nargs="?",
        const="default",
        metavar="SCENARIO",
        help="run on a simulated fleet: a built-in scenario (default: 'default'; see below) or a YAML path",
    )
    p.add_argument("--listen", metavar="HOST:PORT", help="address to serve on (default :9430)")
    p.add_argument("--config", metavar="FILE", help="YAML configuration file")
    p.add_argument("--interval", metavar="SECONDS", help="sampling interval (default 1)")
    p.add_argument(
        "--log-level", choices=["debug", "info", "warning", "error"], help="log level (default info)"
    )
    p.add_argument("--hostname", help="value of the Hostname label (default: NODE_NAME or the host name)")
    p.add_argument("--hostname-label", choices=["Hostname", "hostname"], help="name of the host label")
    p.add_argument(
        "--check-config", action="store_true", help="validate the configuration, print every problem, exit"
    )
    p.add_argument("--version", action="version", version=f"rightsizer-exporter {__version__}")
    return p


def make_source(cfg: ExporterConfig) -> GpuSource:
    if cfg.simulate is not None:
        from .sources.simulated.scenario import check_pace
        from .sources.simulated.source import SimulatedSource, load_scenario

        scenario = load_scenario(cfg.simulate)
        check_pace(scenario, cfg.interval)
        return SimulatedSource(scenario)
    from .sources.nvml.source import NvmlSource

    return NvmlSource(cfg.nvml)


def make_extensions(cfg: ExporterConfig, source: GpuSource | None = None) -> list[Extension]:
    """Pod attribution, queues and right-sizing plug in here as they are configured."""
    extensions: list[Extension] = []
    if cfg.pods.enabled is True or (cfg.pods.enabled == "auto" and os.path.exists(cfg.pods.socket)):
        from .sources.pods.extension import PodAttribution

        # Per-process attribution needs the source's running processes (see sources/pods/attribution.py).
        extensions.append(PodAttribution(cfg.pods, getattr(source, "running_processes", None)))
    from .sources.nvml.events import XidExtension, xid_reporter

    xid_report = xid_reporter(source)
    if xid_report is not None:  # after pod attribution, so XID rows carry the pod labels
        # A live NVML event watch reports its health; injected (simulated) XIDs have none to report.
        extensions.append(XidExtension(xid_report, collector=hasattr(source, "xid_report")))
    if cfg.dcgm_exporter.enabled:  # before right-sizing, which reads the merged fields
        from .sources.dcgm.extension import DcgmExporterExtension

        extensions.append(DcgmExporterExtension(cfg.dcgm_exporter))
    if cfg.queues or cfg.discovery.enabled:
        from .sources.queues.manager import QueueExtension

        queue_extension = QueueExtension(cfg.queues, cfg.interval, dynamic=cfg.discovery.enabled)
        extensions.append(queue_extension)
        if cfg.discovery.enabled:  # after the queues: it hands them the servers it finds
            from .sources.discovery.extension import Discovery

            extensions.append(Discovery(cfg.discovery, cfg.pods, queue_extension, cfg.queues))
    if hasattr(source, "queue_samples"):  # the simulated fleet's own queues
        from .sources.simulated.queues import SimulatedQueues

        extensions.append(SimulatedQueues(source))  # type: ignore[arg-type]
    if cfg.rightsizing.enabled:
        from rightsizing.catalog import load_catalog

        from .rightsizing_live.extension import RightsizingExtension
        from .rightsizing_live.feeds import QueueExtensionFeed

        queues = next((e for e in extensions if e.name == "queues"), None)
        pods = next((e for e in extensions if e.name == "pods"), None)
        extensions.append(
            RightsizingExtension(
                cfg.rightsizing,
                load_catalog(cfg.catalog),
                cfg.interval,
                source,
                QueueExtensionFeed(queues) if queues is not None else None,
                getattr(pods, "numa_placements", None),
                patches=cfg.patches,
                node=cfg.effective_hostname,
                slos=cfg.slos,
                unmatched=unmatched_slos(cfg, source),
            )
        )
    return extensions


def unmatched_slos(cfg: ExporterConfig, source: GpuSource | None) -> list[Unmatched]:
    """The declared SLOs (the file's and the simulated scenario's) that no queue matches."""
    from .rightsizing_live.slo_match import known_queues, unmatched

    slos = (*cfg.slos, *getattr(source, "slos", ()))
    return unmatched(slos, known_queues(cfg.queues, source)) if slos else []


def page_url(addresses: Sequence[object]) -> str:
    """The status page's URL for the start log line: ``http://localhost:PORT/`` when serving on all
    interfaces, else the first bound address."""
    first = next((a for a in addresses if isinstance(a, tuple)), None)
    if first is None:
        return ""
    host, port = str(first[0]), first[1]
    if host in ("0.0.0.0", "::", ""):
        host = "localhost"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/"


def fail(message: str) -> int:
    """Print each line of ``message`` (a configuration error may hold several problems); exit 2."""
    for line in message.splitlines() or [""]:
        print(f"rightsizer-exporter: {line}", file=sys.stderr)
    return 2


async def serve(cfg: ExporterConfig, source: GpuSource) -> int:
    # From here on, SIGTERM/SIGINT stop the exporter wherever start-up is, and within a deadline.
    stop = stop_event(SHUTDOWN_DEADLINE, lambda: event(log, logging.WARNING, "stop took too long; exiting"))
    host, port = parse_listen(cfg.listen)
    listener_stats = ListenerStats()
    sampler = Sampler(
        source,
        Renderer(cfg.hostname_label, resolve_families(cfg.families)),
        cfg.interval,
        cfg.effective_hostname,
        [*make_extensions(cfg, source), ListenerMetrics(listener_stats)],
    )
    runner = web.AppRunner(
        create_app(sampler), access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_REQUEST_GRACE
    )
    await runner.setup()
    try:
        await start_listener(runner, host, port, cfg.http, listener_stats)
    except OSError as exc:
        await runner.cleanup()
        why = "address already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
        return fail(f"cannot listen on {cfg.listen}: {why}")
    try:
        try:
            await unless_stopped(sampler.start(), stop)
        except SourceUnavailable as exc:
            return fail(str(exc))
        except Stopped:
            event(log, logging.INFO, "stopped during start-up")
            return 0
        # Objects made at start-up (libraries, scenario, replayed history) are never scanned again
        # by the cyclic GC: its full collections otherwise stall every thread for 30-60 ms, which
        # makes the queue pollers' burst miss a render (bench/queues.py) and delays scrapes.
        gc.freeze()
        release_free_heap()  # start-up's freed heap pages back to the system (glibc)
        bound = [f"{a[0]}:{a[1]}" if isinstance(a, tuple) else str(a) for a in runner.addresses]
        event(
            log,
            logging.INFO,
            "listening",
            address=",".join(bound) or cfg.listen,
            url=page_url(runner.addresses),
            version=__version__,
            source=source.name,
            interval=cfg.interval,
        )
        await stop.wait()
        event(log, logging.INFO, "stopping")
    finally:
        await runner.cleanup()
        await sampler.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    one_malloc_arena()  # the sampling and render threads share the main heap (glibc)
    with exiting_on_stop_signals():
        return run(argv)


def run(argv: Sequence[str] | None) -> int:
    args = parser().parse_args(argv)
    flags = {
        "listen": args.listen,
        "interval": args.interval,
        "log_level": args.log_level,
        "simulate": args.simulate,
        "hostname": args.hostname,
        "hostname_label": args.hostname_label,
    }
    try:
        cfg = load_config(args.config, flags)
        source = make_source(cfg) if not args.check_config or cfg.simulate else None
    except ConfigError as exc:
        return fail(str(exc))
    ignored = unknown_env(ExporterConfig, others=("RIGHTSIZER_ADAPTER_",))  # the adapter's own
    if args.check_config:
        for name, closest in ignored:
            print(f"rightsizer-exporter: warning: {unknown_env_line(name, closest)}", file=sys.stderr)
        for slo in unmatched_slos(cfg, source):
            print(f"rightsizer-exporter: warning: {slo.line()}", file=sys.stderr)
        print(f"{args.config or 'configuration'}: OK")
        return 0
    assert source is not None
    configure(cfg.log_level)
    for name, closest in ignored:
        ignored_line = "environment variable ignored: not a setting"
        event(log, logging.WARNING, ignored_line, variable=name, closest=closest)
    for slo in unmatched_slos(cfg, source):
        event(log, logging.WARNING, "SLO matches no queue: never judged", slo=slo.slo, queues=slo.workloads)
    try:
        return asyncio.run(serve(cfg, source))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
