"""The ``dcgm_exporter`` section of the exporter's configuration (off unless ``url`` is set)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from rightsizer_core.files import checked_path
from rightsizer_core.settings import setting

DEFAULT_MAX_SERIES = 4096
DEFAULT_MAX_SERIES_BYTES = 4096
DEFAULT_MAX_BODY_BYTES = 16 * 2**20


@dataclass(frozen=True)
class DcgmExporterSettings:
    url: str = setting(
        "",
        "The node's dcgm-exporter /metrics URL (e.g. http://$(NODE_IP):9400/metrics); empty: not read. "
        "Its DCGM_FI_PROF_* ratios fill what NVML does not report (SM and DRAM active before Hopper).",
    )
    interval_seconds: float = setting(
        5.0,
        "How often the page is read (dcgm-exporter itself refreshes every 30 s by default).",
        minimum=0.5,
        maximum=3600,
    )
    timeout_seconds: float = setting(2.0, "Deadline of one read of the page.", minimum=0.05, maximum=60)
    max_age_seconds: float = setting(
        30.0,
        "Values read longer ago than this are no longer used (the source is down then: never 0).",
        minimum=1,
        maximum=86400,
    )
    bearer_token_file: str | None = setting(
        None, "File holding a bearer token for `Authorization: Bearer` (re-read every minute)."
    )
    tls_ca_file: str | None = setting(None, "CA bundle to verify an https:// dcgm-exporter with.")
    tls_insecure_skip_verify: bool = setting(False, "Do not verify its TLS certificate.")
    max_body_bytes: int = setting(
        DEFAULT_MAX_BODY_BYTES,
        "Largest answer read, in bytes (read as it arrives, never held whole); larger: the source is down.",
        minimum=1024,
        maximum=256 * 2**20,
    )
    max_series: int = setting(
        DEFAULT_MAX_SERIES,
        "Most DCGM_FI_PROF_* series one answer may hold; more: the source is down, never read in part.",
        minimum=1,
        maximum=1_000_000,
    )
    max_series_bytes: int = setting(
        DEFAULT_MAX_SERIES_BYTES,
        "Longest DCGM_FI_PROF_* sample line, labels included; longer: the source is down.",
        minimum=256,
        maximum=2**20,
    )

    @property
    def enabled(self) -> bool:
        return bool(self.url)

    def validate(self) -> None:
        if not self.url:
            return
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"dcgm_exporter.url must be an http:// or https:// URL with a host: {self.url!r}"
            )
        if parts.username or parts.password:
            raise ValueError("dcgm_exporter.url: no credentials in the url (use bearer_token_file)")
        try:
            parts.port  # noqa: B018 (raises on a bad port)
        except ValueError:
            raise ValueError(f"dcgm_exporter.url has a bad port: {self.url!r}") from None
        for key in ("bearer_token_file", "tls_ca_file"):
            path = getattr(self, key)
            if path is None:
                continue
            try:
                checked_path(path)
            except OSError as exc:
                raise ValueError(
                    f"dcgm_exporter.{key} {path!r} cannot be read: {exc.strerror or exc}"
                ) from None
