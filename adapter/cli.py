"""``rightsizer-adapter``: HPA's external/custom metrics APIs and KEDA's external scaler."""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from rightsizer_core import __version__
from rightsizer_core.argparsing import Parser, epilog
from rightsizer_core.heap import one_malloc_arena, scheduled_full_collections
from rightsizer_core.listen import parse_listen
from rightsizer_core.listener import ListenerStats, start_listener
from rightsizer_core.logs import configure, event
from rightsizer_core.settings import ConfigError, unknown_env, unknown_env_line
from rightsizer_core.stopping import (
    SHUTDOWN_DEADLINE,
    SHUTDOWN_REQUEST_GRACE,
    exiting_on_stop_signals,
    stop_event,
)

from .cache import Cache
from .config import DEFAULT_PORT, ENV_PREFIX, AdapterConfig, load_config
from .keda.metrics_api import MetricsApiAuth
from .kubernetes.pods import PodLister, wanted
from .promadapter.cli import check_promadapter, load_promadapter, note_resource_rules, promadapter_source
from .security import Security
from .selfmetrics import AdapterMetrics
from .server import create_app, status_body
from .sources import Source
from .sources.prometheus import PrometheusSource
from .sources.scrape import ScrapeSource
from .startcheck import start_problems, token_problem

SWITCH_INTERVAL = 0.0001  # seconds: see ``tune_process``
log = logging.getLogger("rightsizer.adapter")
REFRESH_STOP_WAIT = 2.0  # seconds a stop waits for the refresh task to end


def _epilog() -> str:
    return epilog(
        [
            (
                "straight from an exporter, plain HTTP on loopback, KEDA gRPC too (for trying it out)",
                "rightsizer-adapter --exporter http://127.0.0.1:9430 --insecure-http --listen 127.0.0.1:6443 "
                "--grpc-listen 127.0.0.1:9443",
            ),
            (
                "from Prometheus, as an aggregated API server behind the Kubernetes front proxy",
                "rightsizer-adapter --prometheus-url http://prometheus:9090 "
                "--requestheader-client-ca-file /var/run/front-proxy/ca.crt",
            ),
            ("check a configuration and exit", "rightsizer-adapter --check-config --config adapter.yaml"),
        ],
        [
            ("RIGHTSIZER_ADAPTER_<KEY>", "any scalar setting, e.g. RIGHTSIZER_ADAPTER_PROMETHEUS_URL"),
            ("", "(nested keys joined by _; flags win over the environment, which wins over --config)"),
        ],
        [
            ("0", "stopped by SIGTERM or SIGINT, or --check-config found nothing wrong"),
            ("2", "bad flags or configuration (every problem printed, one a line), cannot listen"),
        ],
    )


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="rightsizer-adapter",
        description="Rightsizer's signals for HPA (external/custom metrics APIs) and KEDA (external scaler).",
        epilog_factory=_epilog,
    )
    a = p.add_argument
    a("--config", metavar="FILE", help="YAML configuration file")
    a("--listen", metavar="HOST:PORT", help=f"HTTPS address (default :{DEFAULT_PORT})")
    a("--tls-cert-file", metavar="FILE", help="serving certificate (default: self-signed, made at start)")
    a("--tls-private-key-file", metavar="FILE", help="key of the serving certificate")
    a(
        "--requestheader-client-ca-file",
        metavar="FILE",
        help="CA of the aggregator's front-proxy client certificate",
    )
    a(
        "--requestheader-allowed-names",
        metavar="CN,...",
        help="front-proxy certificate CNs allowed (default: any)",
    )
    a("--client-ca-file", metavar="FILE", help="CA of x509 client certificates (default: the cluster's)")
    a(
        "--authorization-always-allow-paths",
        metavar="PATH,...",
        help="paths served without authentication (default /healthz,/livez,/readyz; trailing * = prefix)",
    )
    a(
        "--insecure-http",
        action="store_true",
        default=None,
        help="plain HTTP, no auth (loopback addresses only)",
    )
    a(
        "--allow-insecure-remote",
        action="store_true",
        default=None,
        help="let --insecure-http listen anywhere",
    )
    a("--grpc-listen", metavar="HOST:PORT", help="KEDA external-scaler gRPC address (default: off)")
    a("--grpc-tls-cert-file", metavar="FILE", help="gRPC serving certificate (default: plaintext)")
    a("--grpc-tls-private-key-file", metavar="FILE", help="key of the gRPC certificate")
    a("--grpc-client-ca-file", metavar="FILE", help="require gRPC client certificates signed by this CA")
    a(
        "--prometheus-url",
        metavar="URL",
        help="Prometheus (or Thanos/Mimir/VictoriaMetrics) query API base URL",
    )
    a("--prometheus-bearer-token-file", metavar="FILE", help="bearer token for Prometheus")
    a("--prometheus-username", help="basic-auth user for Prometheus")
    a("--prometheus-password-file", metavar="FILE", help="basic-auth password for Prometheus")
    a("--prometheus-ca-file", metavar="FILE", help="CA bundle for Prometheus's certificate")
    a("--prometheus-cert-file", metavar="FILE", help="client certificate for Prometheus")
    a("--prometheus-key-file", metavar="FILE", help="client certificate key for Prometheus")
    a(
        "--prometheus-insecure-skip-verify",
        action="store_true",
        default=None,
        help="do not verify Prometheus's TLS",
    )
    a("--refresh-interval", metavar="SECONDS", help="Prometheus mode: seconds between refreshes (default 5)")
    a(
        "--exporter",
        metavar="URL",
        action="append",
        help="exporter to scrape directly (repeatable; direct mode)",
    )
    a(
        "--scrape-interval",
        metavar="SECONDS",
        help="direct mode: seconds between exporter scrapes (default 0.5)",
    )
    a(
        "--prometheus-adapter-config",
        metavar="FILE",
        help="prometheus-adapter configuration file (rules, externalRules) to serve unchanged",
    )
    a("--metrics-api-key-file", metavar="FILE", help="KEDA metrics-api: key expected in X-API-KEY")
    a("--metrics-api-bearer-token-file", metavar="FILE", help="KEDA metrics-api: expected bearer token")
    a("--log-level", choices=["debug", "info", "warning", "error"], help="log level (default info)")
    a("--check-config", action="store_true", help="validate the configuration, print every problem, exit")
    a(
        "--no-file-checks",
        action="store_true",
        help="with --check-config: leave out the files it names (a configuration for another machine)",
    )
    a("--version", action="version", version=f"rightsizer-adapter {__version__}")
    return p


def flags_of(args: argparse.Namespace) -> dict[str, Any]:
    """Flags given on the command line, nested as in the configuration file."""
    names = args.requestheader_allowed_names
    always = args.authorization_always_allow_paths
    always_paths = [p.strip() for p in always.split(",") if p.strip()] if always is not None else None
    nested: dict[str, Any] = {
        "listen": args.listen,
        "insecure_http": args.insecure_http,
        "allow_insecure_remote": args.allow_insecure_remote,
        "log_level": args.log_level,
        "tls": {"cert_file": args.tls_cert_file, "private_key_file": args.tls_private_key_file},
        "requestheader": {
            "client_ca_file": args.requestheader_client_ca_file,
            "allowed_names": [n.strip() for n in names.split(",") if n.strip()]
            if names is not None
            else None,
        },
        "authentication": {"client_ca_file": args.client_ca_file},
        "authorization": {"always_allow_paths": always_paths},
        "grpc": {
            "listen": args.grpc_listen,
            "tls_cert_file": args.grpc_tls_cert_file,
            "tls_private_key_file": args.grpc_tls_private_key_file,
            "client_ca_file": args.grpc_client_ca_file,
        },
        "prometheus": {
            "url": args.prometheus_url,
            "bearer_token_file": args.prometheus_bearer_token_file,
            "username": args.prometheus_username,
            "password_file": args.prometheus_password_file,
            "ca_file": args.prometheus_ca_file,
            "cert_file": args.prometheus_cert_file,
            "key_file": args.prometheus_key_file,
            "insecure_skip_verify": args.prometheus_insecure_skip_verify,
            "refresh_interval_seconds": args.refresh_interval,
        },
        "prometheus_adapter": {"config_file": args.prometheus_adapter_config},
        "direct": {"exporters": args.exporter, "scrape_interval_seconds": args.scrape_interval},
        "metrics_api": {
            "api_key_file": args.metrics_api_key_file,
            "bearer_token_file": args.metrics_api_bearer_token_file,
        },
    }

    def prune(d: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for k, v in d.items():
            v = prune(v) if isinstance(v, dict) else v
            if v is not None and v != {}:
                out[k] = v
        return out

    return prune(nested)


def fail(message: str) -> int:
    """Print each line of ``message`` (a configuration error may hold several problems); exit 2."""
    for line in message.splitlines() or [""]:
        print(f"rightsizer-adapter: {line}", file=sys.stderr)
    return 2


def make_source(cfg: AdapterConfig, metrics: AdapterMetrics) -> Source:
    if cfg.prometheus_adapter.config_file:
        return promadapter_source(cfg, metrics)
    if cfg.mode == "prometheus":
        return PrometheusSource(cfg.prometheus, metrics)
    return ScrapeSource(cfg.direct, metrics)


async def serve(cfg: AdapterConfig) -> int:
    # From here on, SIGTERM/SIGINT stop the adapter wherever start-up is, and within a deadline.
    stop = stop_event(SHUTDOWN_DEADLINE, lambda: event(log, logging.WARNING, "stop took too long; exiting"))
    metrics = AdapterMetrics()
    try:
        security = Security(cfg)
        keda_auth = MetricsApiAuth(cfg.metrics_api) if cfg.metrics_api.enabled else None
    except ValueError as exc:
        return fail(str(exc))
    token = token_problem(cfg)
    if token:
        return fail(token)
    tls = security.tls.context if security.tls else None
    source = make_source(cfg, metrics)
    try:
        await source.start()
    except ValueError as exc:  # e.g. Prometheus TLS files that cannot be loaded
        return fail(str(exc))
    cache = Cache(cfg.effective_rules, source, metrics, cfg.max_cached_answers, cfg.max_cached_answer_bytes)
    await security.start()
    pod_lister = PodLister(cfg.kubernetes) if wanted(cfg.kubernetes) else None
    if pod_lister is not None:
        await pod_lister.start()
    app = create_app(cache, security.gate, metrics, keda_auth, pod_lister)
    runner = web.AppRunner(
        app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_REQUEST_GRACE
    )
    await runner.setup()
    grpc_server = None
    refresher: asyncio.Task[None] | None = None
    try:
        host, port = parse_listen(cfg.listen)
        try:
            listener_stats = ListenerStats()
            metrics.attach_listener(listener_stats)
            await start_listener(
                runner,
                host,
                port,
                cfg.http,
                listener_stats,
                name="https" if tls else "http",
                ssl_context=tls,
                error_body=status_body,
            )
        except OSError as exc:
            why = "address already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
            return fail(f"cannot listen on {cfg.listen}: {why}")
        fields: dict[str, Any] = {"pod_labels": "api" if pod_lister else "series"}
        if cfg.grpc.listen:
            # gRPC's C core would print its own bind errors; ours below say it in one line.
            os.environ.setdefault("GRPC_VERBOSITY", "NONE")
            from .keda.scaler import ExternalScaler, start_server

            try:
                scaler = ExternalScaler(cache, metrics)
                grpc_server, grpc_port = await start_server(
                    cfg.grpc, scaler, cfg.http, credentials=security.grpc_credentials()
                )
            except ValueError as exc:
                return fail(str(exc))
            fields["grpc_address"] = f"{parse_listen(cfg.grpc.listen)[0] or '0.0.0.0'}:{grpc_port}"
        bound = [f"{a[0]}:{a[1]}" for a in runner.addresses if isinstance(a, tuple)]
        event(
            log,
            logging.INFO,
            "listening",
            address=",".join(bound) or cfg.listen,
            scheme="http" if cfg.insecure_http else "https",
            mode=cfg.mode,
            rules=len(cfg.effective_rules),
            version=__version__,
            **fields,
            **security.describe(),
        )
        security.warn(keda_auth is not None and keda_auth.configured, keda_auth is not None)
        refresher = asyncio.create_task(cache.run())
        await stop.wait()
        event(log, logging.INFO, "stopping")
        return 0
    finally:
        if refresher is not None:
            cache.stop()
            refresher.cancel()
            await asyncio.wait({refresher}, timeout=REFRESH_STOP_WAIT)  # never waits on a lost cancel
        if grpc_server is not None:
            await grpc_server.stop(grace=1.0)
        await runner.cleanup()
        await security.close()
        await source.close()
        if pod_lister is not None:
            await pod_lister.close()


def main(argv: Sequence[str] | None = None) -> int:
    with exiting_on_stop_signals():
        return run(argv)


def tune_process() -> None:
    """The process-wide settings a replica serves with (``run``; ``bench/adapter_parse.py`` runs
    its refreshes with them too)."""
    scheduled_full_collections()  # the cache's refreshes would set off one every second: heap.py
    # A refresh decodes and sorts answers in a worker thread; the event loop waits for the GIL each
    # time it wakes (every request's socket I/O releases it), up to the switch interval each time:
    # at 5 ms (Python's default) a request waits tens of ms behind a refresh at fleet scale; 0.1 ms
    # rather than 0.5 took the p50 from 7 to 2 ms, the p99 from 96 to 74 (docs/fleet-scale.md).
    sys.setswitchinterval(SWITCH_INTERVAL)
    one_malloc_arena()  # the worker threads allocate from the main heap, not an arena each (glibc)


def run(argv: Sequence[str] | None) -> int:
    args = parser().parse_args(argv)
    try:
        cfg = load_config(args.config, flags_of(args))
    except ConfigError as exc:
        return fail(str(exc))
    if args.check_config and not args.no_file_checks:
        problems = asyncio.run(start_problems(cfg))
        if problems:
            return fail("\n".join(problems))
    if cfg.prometheus_adapter.config_file:
        try:
            file = load_promadapter(cfg.prometheus_adapter.config_file)
        except ConfigError as exc:
            return fail(str(exc))
        if args.check_config:
            return asyncio.run(check_promadapter(cfg, file))
    ignored = unknown_env(AdapterConfig, ENV_PREFIX)
    if args.check_config:
        for name, closest in ignored:
            print(f"rightsizer-adapter: warning: {unknown_env_line(name, closest)}", file=sys.stderr)
        print(f"{args.config or 'configuration'}: OK ({cfg.mode} mode, {len(cfg.effective_rules)} rules)")
        return 0
    configure(cfg.log_level)
    for name, closest in ignored:
        ignored_line = "environment variable ignored: not a setting"
        event(log, logging.WARNING, ignored_line, variable=name, closest=closest)
    if cfg.prometheus_adapter.config_file:
        note_resource_rules(cfg.prometheus_adapter.config_file)
    tune_process()
    try:
        return asyncio.run(serve(cfg))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
