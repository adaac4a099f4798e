"""The adapter's configuration schema (YAML, ``RIGHTSIZER_ADAPTER_*`` environment, flags).

Built on the shared typed settings machinery (``rightsizer_core/settings.py``): unknown keys are
rejected and every error names the file, the key and the value.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Literal

from rightsizer_core.limits import ListenerLimits
from rightsizer_core.listen import parse_listen
from rightsizer_core.settings import ConfigError, build, env_overrides, merge, read_yaml, setting

from .promadapter.settings import PromAdapterSettings
from .rules import BUILTIN_RULES, RuleConfig

DEFAULT_PORT = 6443
ENV_PREFIX = "RIGHTSIZER_ADAPTER_"


_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 token


def check_header(name: str, value: str, where: str) -> None:
    """Refuse a header a request cannot carry as written (a CR or LF would start another header)."""
    if not _HEADER_NAME.fullmatch(name):
        raise ValueError(f"{where}: {name[:60]!r} is not an HTTP header name")
    bad = next((c for c in value if not (c.isascii() and (c.isprintable() or c == "\t"))), None)
    if bad is not None:
        raise ValueError(
            f"{where}.{name}: the value holds {bad!r}, which an HTTP header value cannot carry"
        )


@dataclass(frozen=True)
class TlsSettings:
    cert_file: str | None = setting(None, "Serving certificate (PEM); absent: a self-signed one is made.")
    private_key_file: str | None = setting(None, "Private key of the serving certificate (PEM).")
    self_signed_names: list[str] = setting(
        [], "Extra DNS names or IPs on the generated certificate (e.g. <service>.<namespace>.svc)."
    )

    def validate(self) -> None:
        if (self.cert_file is None) != (self.private_key_file is None):
            raise ValueError("tls.cert_file and tls.private_key_file go together")


@dataclass(frozen=True)
class RequestHeaderSettings:
    client_ca_file: str | None = setting(
        None, "CA that signs the aggregator's front-proxy client certificate (requestheader-client-ca-file)."
    )
    allowed_names: list[str] = setting([], "Client certificate CNs allowed to pass user headers; empty: any.")
    username_headers: list[str] = setting(["X-Remote-User"], "Headers holding the user name.")
    group_headers: list[str] = setting(["X-Remote-Group"], "Headers holding the user's groups.")
    extra_headers_prefix: list[str] = setting(["X-Remote-Extra-"], "Prefixes of user-extra headers.")


Delegation = Literal["auto", "on", "off"]


@dataclass(frozen=True)
class AuthenticationSettings:
    delegated: Delegation = setting(
        "auto",
        "Read kube-system/extension-apiserver-authentication and check bearer tokens with TokenReview; "
        "auto: when the Kubernetes API is known (in a cluster, or kubernetes.api_url).",
    )
    client_ca_file: str | None = setting(
        None, "CA of x509 client certificates (users CN, groups O); overrides the ConfigMap's client-ca-file."
    )
    anonymous: bool = setting(False, "Serve requests without credentials as system:anonymous (authorized).")
    token_success_ttl_seconds: float = setting(10.0, "How long a valid token's TokenReview is reused.",
                                               minimum=0, maximum=3600)
    token_failure_ttl_seconds: float = setting(10.0, "How long a refused token's TokenReview is reused.",
                                               minimum=0, maximum=3600)


@dataclass(frozen=True)
class AuthorizationSettings:
    allowed_users: list[str] = setting([], "Static authorization: users allowed to read metrics.")
    allowed_groups: list[str] = setting([], "Static authorization: groups allowed to read metrics.")
    delegated: Delegation = setting(
        "auto",
        "Authorize with SubjectAccessReview; auto: when the Kubernetes API is known and no static "
        "allowed_users/allowed_groups are given.",
    )
    allowed_ttl_seconds: float = setting(10.0, "How long an allowing SubjectAccessReview is reused.",
                                         minimum=0, maximum=3600)
    denied_ttl_seconds: float = setting(10.0, "How long a denying SubjectAccessReview is reused.",
                                        minimum=0, maximum=3600)
    always_allow_paths: list[str] = setting(
        ["/healthz", "/livez", "/readyz"],
        "Paths served without authentication or authorization (exact; a trailing * makes a prefix).",
    )


@dataclass(frozen=True)
class GrpcSettings:
    listen: str | None = setting(None, "HOST:PORT of KEDA's external-scaler gRPC service; absent: off.")
    tls_cert_file: str | None = setting(None, "gRPC serving certificate (PEM); absent: plaintext.")
    tls_private_key_file: str | None = setting(None, "Private key of the gRPC certificate (PEM).")
    client_ca_file: str | None = setting(
        None, "CA for KEDA's client certificate; set: client certs required."
    )

    def validate(self) -> None:
        if self.listen is not None:
            parse_listen(self.listen)
        if (self.tls_cert_file is None) != (self.tls_private_key_file is None):
            raise ValueError("grpc.tls_cert_file and grpc.tls_private_key_file go together")
        if self.client_ca_file and not self.tls_cert_file:
            raise ValueError("grpc.client_ca_file needs grpc.tls_cert_file")


@dataclass(frozen=True)
class MetricsApiSettings:
    enabled: bool = setting(True, "Serve KEDA's metrics-api JSON at /keda/v1/metrics/{metric}.")
    api_key_file: str | None = setting(None, "File holding the key expected in X-API-KEY.")
    bearer_token_file: str | None = setting(
        None, "File holding a static token accepted as Authorization: Bearer (other tokens: TokenReview)."
    )
    basic_username: str | None = setting(None, "User name of HTTP basic authentication (authModes basic).")
    basic_password_file: str | None = setting(None, "File holding the basic-authentication password.")

    def validate(self) -> None:
        if (self.basic_username is None) != (self.basic_password_file is None):
            raise ValueError("metrics_api.basic_username and metrics_api.basic_password_file go together")


DEADLINE_FLOOR_SECONDS = 5.0  # the shortest query deadline by default (``PrometheusSettings.deadline``)


@dataclass(frozen=True)
class PrometheusSettings:
    url: str | None = setting(None, "Base URL of the Prometheus query API (Thanos, Mimir and VM work too).")
    refresh_interval_seconds: float = setting(5.0, "Cadence of the rule queries.", minimum=0.1, maximum=300)
    timeout_seconds: float | None = setting(
        None,
        "Deadline of one query; null: twice refresh_interval_seconds, at least 5 s (a query past it "
        "is lost with the engine's work on it, and its rule answers 503 until the next refresh).",
        minimum=0.1,
        maximum=120,
    )
    bearer_token_file: str | None = setting(None, "File with a bearer token (re-read every refresh).")
    username: str | None = setting(None, "Basic-auth user name.")
    password_file: str | None = setting(None, "File with the basic-auth password.")
    ca_file: str | None = setting(None, "CA bundle to verify Prometheus's certificate.")
    cert_file: str | None = setting(None, "Client certificate for Prometheus (PEM).")
    key_file: str | None = setting(None, "Client certificate key (PEM).")
    insecure_skip_verify: bool = setting(False, "Do not verify Prometheus's certificate.")
    headers: dict[str, str] = setting({}, "Extra request headers (e.g. X-Scope-OrgID for Mimir).")
    max_series_per_rule: int = setting(
        100000, "Answers longer than this fail the rule (each source-state part is counted alone).", minimum=1
    )
    stale_after_seconds: float = setting(
        60.0,
        "A scrape or a sample older than this (engine clock) is not current: what it gave is not "
        "served (503). Also the window in which an exporter's rightsizer_last_sample_timestamp_seconds "
        "must move; keep it above twice the scrape interval and above the exporter's interval.",
        minimum=1,
        maximum=3600,
    )
    source_horizon_seconds: float = setting(
        3600.0,
        "How long an exporter that held a series at its last good scrape still counts for the "
        "requests selecting it after it went down or away (503 until another publishes it).",
        minimum=60,
        maximum=7 * 86400,
    )
    rule_idle_seconds: float = setting(
        300.0,
        "A rule no request asked for in this long is not refreshed (its query is not sent, its values "
        "are dropped) until one does; that request is answered 503 and wakes a refresh at once. Keep it "
        "well above the autoscalers' polling periods (HPA 15 s, KEDA 30 s). 0: every rule, always.",
        minimum=0,
        maximum=86400,
    )

    @property
    def deadline(self) -> float:
        """Seconds one query may take: ``timeout_seconds``, else twice the refresh interval (at
        least 5 s, at most 120). A query cut at its deadline gives nothing for the engine's work on
        it: at 40,000 GPUs on a shared engine a rule's query takes 2 to 6 s (docs/fleet-scale.md),
        so a deadline of one interval lost whole refreshes, while an answer arriving within two
        intervals is still fresher than none."""
        if self.timeout_seconds is not None:
            return self.timeout_seconds
        return min(120.0, max(DEADLINE_FLOOR_SECONDS, 2 * self.refresh_interval_seconds))

    def validate(self) -> None:
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"prometheus.url must start with http:// or https://; got {self.url!r}")
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("prometheus.cert_file and prometheus.key_file go together")
        if self.password_file and not self.username:
            raise ValueError("prometheus.password_file needs prometheus.username")
        for name, value in self.headers.items():
            check_header(name, value, "prometheus.headers")


@dataclass(frozen=True)
class DirectSettings:
    exporters: list[str] = setting([], "Exporter URLs scraped directly (direct mode, no Prometheus).")
    scrape_interval_seconds: float = setting(
        0.5,
        "Scrape cadence for exporters that publish no sample timestamp, and the retry cadence "
        "(Rightsizer exporters are scraped just after each new snapshot).",
        minimum=0.05,
        maximum=300,
    )
    timeout_seconds: float = setting(2.0, "Deadline of one exporter scrape.", minimum=0.05, maximum=60)
    stale_after_seconds: float = setting(
        5.0,
        "How long an exporter's last values are served while it fails, or while its sample time "
        "(rightsizer_last_sample_timestamp_seconds) stands still beyond its own interval; after "
        "that the requests selecting what it published answer 503.",
        minimum=0,
        maximum=3600,
    )
    max_body_bytes: int = setting(
        16 * 2**20,
        "Largest /metrics answer read from one exporter, counted as received and again after "
        "gzip; a larger one makes that exporter down (a 64-GPU exporter answers about 1.1 MB).",
        minimum=1024,
        maximum=2**30,
    )
    max_series_per_exporter: int = setting(
        20_000,
        "Most series of the families the rules read that one exporter may publish; more makes "
        "that exporter down (64 GPUs publish a few hundred).",
        minimum=1,
        maximum=10_000_000,
    )

    def validate(self) -> None:
        for url in self.exporters:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"exporter URL must start with http:// or https://; got {url!r}")


@dataclass(frozen=True)
class KubernetesSettings:
    pod_labels: Literal["auto", "api", "series"] = setting(
        "auto",
        "Where the pod labels of custom-metrics pods queries come from: the Kubernetes API (api), the "
        "series' own labels (series), or the API when running in a cluster (auto).",
    )
    api_url: str | None = setting(None, "Kubernetes API URL; default: the in-cluster service address.")
    token_file: str = setting(
        "/var/run/secrets/kubernetes.io/serviceaccount/token", "Bearer token for the API (re-read per list)."
    )
    ca_file: str = setting("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt", "CA of the API server.")
    insecure_skip_verify: bool = setting(False, "Do not verify the API server's certificate.")
    pod_list_ttl_seconds: float = setting(
        15.0, "How long one namespace's pod list is used.", minimum=0, maximum=3600
    )
    timeout_seconds: float = setting(5.0, "Deadline of one pod LIST request.", minimum=0.1, maximum=60)


@dataclass(frozen=True)
class AdapterConfig:
    listen: str = setting(
        f":{DEFAULT_PORT}", "HOST:PORT of the HTTPS server (metrics APIs, KEDA metrics-api)."
    )
    insecure_http: bool = setting(False, "Serve plain HTTP without authentication (loopback only).")
    allow_insecure_remote: bool = setting(False, "Let insecure_http listen on a non-loopback address.")
    log_level: Literal["debug", "info", "warning", "error"] = setting("info", "Log level.")
    http: ListenerLimits = setting(
        ListenerLimits(),
        "Limits of the HTTPS listener against slow, idle and oversized clients; the gRPC listener takes "
        "its header deadline (as HTTP/2 handshake deadline), idle timeout and connection cap.",
    )
    builtin_rules: bool = setting(True, "Serve the built-in rules (a rule of the same name replaces one).")
    rules: list[RuleConfig] = setting([], "Rules: which metrics are served and how (see README).")
    tls: TlsSettings = setting(TlsSettings(), "Serving certificate.")
    requestheader: RequestHeaderSettings = setting(RequestHeaderSettings(), "Front-proxy authentication.")
    authentication: AuthenticationSettings = setting(AuthenticationSettings(), "Client authentication.")
    authorization: AuthorizationSettings = setting(AuthorizationSettings(), "Authorization.")
    file_reload_interval_seconds: float = setting(
        10.0, "How often certificate, CA and key files are checked for changes.", minimum=0.05, maximum=3600
    )
    grpc: GrpcSettings = setting(GrpcSettings(), "KEDA external scaler.")
    metrics_api: MetricsApiSettings = setting(MetricsApiSettings(), "KEDA metrics-api endpoint.")
    prometheus: PrometheusSettings = setting(PrometheusSettings(), "Prometheus mode.")
    direct: DirectSettings = setting(DirectSettings(), "Direct mode.")
    kubernetes: KubernetesSettings = setting(KubernetesSettings(), "Kubernetes API (pod labels).")
    prometheus_adapter: PromAdapterSettings = setting(
        PromAdapterSettings(), "A prometheus-adapter configuration file served unchanged (Prometheus mode)."
    )
    max_cached_answers: int = setting(
        10000, "Distinct (metric, namespace, selector) answers kept per refresh.", minimum=1
    )
    max_cached_answer_bytes: int = setting(
        32 * 2**20,
        "Bytes of answer bodies kept per refresh; answers past it are computed again on each request.",
        minimum=0,
        maximum=2**30,
    )

    @property
    def mode(self) -> Literal["prometheus", "direct"]:
        return "prometheus" if self.prometheus.url else "direct"

    @property
    def effective_rules(self) -> tuple[RuleConfig, ...]:
        own = {r.name for r in self.rules}
        builtin_on = self.builtin_rules and not self.prometheus_adapter.config_file
        builtin = [r for r in BUILTIN_RULES if r.name not in own] if builtin_on else []
        return (*builtin, *self.rules)

    def validate(self) -> None:
        parse_listen(self.listen)
        seen: set[str] = set()
        for rule in self.rules:
            if rule.name in seen:
                raise ValueError(f"two rules are named {rule.name!r}")
            seen.add(rule.name)

    def check_complete(self) -> None:
        """Checks across sections that only the final merge of file, environment and flags can pass."""
        host, _ = parse_listen(self.listen)
        if bool(self.prometheus.url) == bool(self.direct.exporters):
            raise ValueError(
                "give either prometheus.url (--prometheus-url) or exporters (--exporter), one of them"
            )
        if self.insecure_http and not self.allow_insecure_remote and not _is_loopback(host):
            raise ValueError(
                f"insecure_http serves without TLS or authentication, so it listens on loopback only; "
                f"{self.listen!r} is not (use 127.0.0.1:PORT, or allow_insecure_remote to force it)"
            )
        if self.prometheus_adapter.config_file and self.mode != "prometheus":
            raise ValueError("prometheus_adapter.config_file needs prometheus.url (--prometheus-url)")
        if not self.effective_rules and not self.prometheus_adapter.config_file:
            raise ValueError("no rules: builtin_rules is off and rules is empty")
        for rule in self.effective_rules:
            if self.mode == "prometheus" and rule.query is None:
                raise ValueError(f"rule {rule.name!r} has no query, which Prometheus mode needs")
            if self.mode == "direct" and rule.direct is None:
                raise ValueError(f"rule {rule.name!r} has no direct block, which direct mode needs")


def _is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_config(
    path: str | None, flags: dict[str, Any], environ: dict[str, str] | None = None
) -> AdapterConfig:
    """File, then environment, then flags (nested like the file; only those given)."""
    data: dict[str, Any] = read_yaml(path) if path else {}
    env = env_overrides(AdapterConfig, ENV_PREFIX, environ)
    cfg: AdapterConfig | None = None
    for where, merged in (
        (path or "config", data),
        (f"environment ({ENV_PREFIX}*)", merge(data, env)),
        ("command line", merge(merge(data, env), flags)),
    ):
        try:
            cfg = build(AdapterConfig, merged, "")
        except ConfigError as exc:
            raise exc.within(where) from None
    assert cfg is not None
    try:
        cfg.check_complete()
    except ValueError as exc:
        raise ConfigError(f"{path or 'configuration'}: {exc}") from None
    return cfg
