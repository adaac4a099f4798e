"""The ``discovery`` section of the exporter's configuration: inference servers found on the node."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from rightsizer_core.files import checked_path
from rightsizer_core.selectors import SelectorError, parse
from rightsizer_core.settings import setting

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class DiscoverySettings:
    enabled: bool = setting(
        False,
        "Find the inference servers of this node's pods (annotated rightsizer.io/scrape or "
        "prometheus.io/scrape) in the kubelet's pod list and poll each pod's own /metrics.",
    )
    kubelet_url: str = setting(
        "",
        "The kubelet's pod list; empty: https://$NODE_IP:10250/pods (NODE_IP from the downward API), "
        "else https://127.0.0.1:10250/pods.",
    )
    bearer_token_file: str = setting(
        f"{SERVICE_ACCOUNT}/token",
        "Token sent to the kubelet (it asks the API server whether it may read nodes/pods or "
        "nodes/proxy); re-read every minute. Empty: none.",
    )
    tls_ca_file: str | None = setting(None, "CA bundle to verify the kubelet's serving certificate with.")
    tls_insecure_skip_verify: bool = setting(
        False, "Do not verify the kubelet's certificate (self-signed on most clusters)."
    )
    refresh_interval_seconds: float = setting(
        10.0, "How often the pod list is read: pods come and go within this time.", minimum=1, maximum=3600
    )
    timeout_seconds: float = setting(
        2.0, "Deadline of one pod-list read (and of one page probe).", minimum=0.1, maximum=60
    )
    namespaces: list[str] = setting([], "Only pods of these namespaces; empty: every namespace.")
    label_selector: str = setting(
        "", "Only pods whose labels match this Kubernetes label selector (app in (chat,embed),tier!=dev)."
    )
    prometheus_annotations: bool = setting(
        True,
        'Also take pods annotated prometheus.io/scrape: "true" whose server kind the container image '
        'or the page tells (vllm, sglang, tgi, triton); rightsizer.io/scrape: "false" opts a pod out.',
    )
    max_servers: int = setting(
        64,
        "Most servers discovered on this node; pods past it (in namespace/name order, servers "
        "already polled first) are listed as skipped, never polled.",
        minimum=1,
        maximum=1000,
    )
    max_answer_bytes: int = setting(
        16 * 2**20,
        "Largest pod list read, in bytes (110 pods are a few hundred KiB); a larger one fails the "
        "refresh and the servers found before are kept.",
        minimum=65536,
        maximum=256 * 2**20,
    )
    poll_interval: float | None = setting(
        None,
        "Polling interval of each discovered server, as a queue entry's interval; default the "
        "exporter's interval.",
        minimum=0.05,
        maximum=3600,
    )

    def validate(self) -> None:
        if self.timeout_seconds >= self.refresh_interval_seconds:
            raise ValueError("timeout_seconds must be shorter than refresh_interval_seconds")
        if self.kubelet_url:
            parts = urlsplit(self.kubelet_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"kubelet_url must be an http:// or https:// URL; got {self.kubelet_url!r}")
        try:
            parse(self.label_selector)
        except SelectorError as exc:
            raise ValueError(f"label_selector: {exc}") from None
        if self.tls_ca_file is not None:
            try:
                checked_path(self.tls_ca_file)  # readable, and a regular file
            except OSError as exc:
                raise ValueError(
                    f"tls_ca_file {self.tls_ca_file!r} cannot be read: {exc.strerror or exc}"
                ) from None
        for ns in self.namespaces:
            if not ns or len(ns) > 63:
                raise ValueError(f"namespaces: {ns!r} is not a namespace name")
