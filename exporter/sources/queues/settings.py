"""The schema of one ``queues:`` entry of the exporter's configuration.

Each entry is checked when the configuration loads; a wrong entry is a configuration error that
names the entry (``queues[2]: queue 'chat': ...``), so the exporter exits 2 before it starts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from rightsizer_core.files import checked_path, read_secret
from rightsizer_core.settings import setting
from rightsizing.models import BUILTIN, Architecture, PlanError, builtin, from_config

SCRAPE_KINDS = ("vllm", "tgi", "triton", "sglang", "prometheus")
KINDS = (*SCRAPE_KINDS, "redis", "http_json")
RESERVED_LABELS = frozenset({"queue", "kind"})
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")  # RFC 9110 field-value: VCHAR, SP, HTAB, obs-text
_HEADERS_SET_BY_THE_EXPORTER = frozenset({"host", "content-length", "transfer-encoding", "connection"})

# Bounds on what one source may send (each a setting of the entry; these are the defaults).
DEFAULT_MAX_SERIES = 10_000
DEFAULT_MAX_SERIES_BYTES = 8192
DEFAULT_MAX_BODY_BYTES = {"exposition": 16 * 2**20, "http_json": 2**20}
DEFAULT_MAX_GROUPS = 1000

# Which optional keys make sense for which kinds; any other use is a configuration error.
_KEYS_FOR = {
    "metric": ("prometheus",),
    "in_flight_metric": ("prometheus",),
    "match": SCRAPE_KINDS,
    "key": ("redis",),
    "group": ("redis",),
    "path": ("http_json",),
    "in_flight_path": ("http_json",),
    "bearer_token_file": (*SCRAPE_KINDS, "http_json"),
    "headers": (*SCRAPE_KINDS, "http_json"),
    "max_series": SCRAPE_KINDS,
    "max_series_bytes": SCRAPE_KINDS,
    "max_body_bytes": (*SCRAPE_KINDS, "http_json", "redis"),
    "max_groups": ("redis",),
    "model": ("vllm", "sglang"),
    "kv_cache_dtype": ("sglang",),
}


@dataclass(frozen=True)
class BasicAuthSettings:
    username: str = setting("", "User name (for Redis: the ACL user; empty means the default user).")
    password: str | None = setting(None, "Password (prefer password_file).")
    password_file: str | None = setting(None, "File holding the password (re-read every minute).")

    def validate(self) -> None:
        if self.password is not None and self.password_file is not None:
            raise ValueError("basic_auth: give password or password_file, not both")


@dataclass(frozen=True)
class QueueSettings:
    name: str = setting("", "Unique name of the queue; the `queue` label of its series (required).")
    kind: str = setting("", f"What the source is: {', '.join(KINDS)} (required).")
    url: str = setting(
        "",
        "Where to read it: the server's /metrics URL, a redis:// or rediss:// URL, or the JSON "
        "endpoint's URL (required).",
    )
    metric: str | None = setting(None, "kind prometheus: the sample name whose value is the depth.")
    in_flight_metric: str | None = setting(
        None, "kind prometheus: the sample name whose value is the number in flight (optional)."
    )
    match: dict[str, str] = setting(
        {}, "Exposition kinds: label = value pairs a series must carry to count (others are summed)."
    )
    key: str | None = setting(None, "kind redis: the key (list, stream, sorted set or set; type detected).")
    group: str | None = setting(
        None, "kind redis: a stream consumer group; depth is its lag, in flight its pending count."
    )
    path: str | None = setting(
        None, "kind http_json: dotted path to the depth in the JSON answer (`queue.waiting`, `items.0.n`)."
    )
    in_flight_path: str | None = setting(None, "kind http_json: dotted path to the number in flight.")
    interval: float | None = setting(
        None,
        "Polling interval in seconds; default the exporter's interval. Rounded to a whole multiple of "
        "the exporter's interval so each poll lands just before a snapshot is rendered.",
        minimum=0.05,
        maximum=3600,
    )
    timeout: float | None = setting(
        None,
        "Deadline of one poll in seconds; default the interval, at least 1 and at most 10.",
        minimum=0.01,
        maximum=300,
    )
    backoff_max: float = setting(
        30.0,
        "Longest wait between polls of a failing source (waits double from one interval).",
        minimum=0.05,
        maximum=3600,
    )
    labels: dict[str, str] = setting(
        {}, "Static labels added to the depth and in-flight series (e.g. namespace, workload)."
    )
    bearer_token_file: str | None = setting(
        None,
        "HTTP kinds: file holding a bearer token for `Authorization: Bearer` (re-read every minute; "
        "missing or empty: refused at start).",
    )
    basic_auth: BasicAuthSettings | None = setting(
        None, "HTTP basic auth, or Redis ACL user/password: {username, password | password_file}."
    )
    headers: dict[str, str] = setting({}, "HTTP kinds: extra request headers (e.g. X-API-Key).")
    tls_ca_file: str | None = setting(None, "CA bundle to verify an https:// or rediss:// server with.")
    tls_insecure_skip_verify: bool = setting(False, "Do not verify the server's TLS certificate.")
    max_body_bytes: int | None = setting(
        None,
        "Largest answer read, in bytes; a larger one marks the source down. Default 16 MiB for "
        "expositions (read as they arrive, never held whole) and Redis answers (each command's, cut "
        "off where it passes the bound), 1 MiB for http_json (parsed whole).",
        minimum=1024,
        maximum=256 * 2**20,
    )
    max_series: int | None = setting(
        None,
        f"Exposition kinds: most series of the metrics read (default {DEFAULT_MAX_SERIES:,}); an answer "
        "with more marks the source down, never read in part.",
        minimum=1,
        maximum=1_000_000,
    )
    max_series_bytes: int | None = setting(
        None,
        f"Exposition kinds: longest sample line of a metric read, labels included (default "
        f"{DEFAULT_MAX_SERIES_BYTES:,} bytes); a longer one marks the source down.",
        minimum=256,
        maximum=2**20,
    )
    model: str | None = setting(
        None,
        "kinds vllm, sglang: the model the server runs, a `rightsizer plan` built-in (llama-3-8b, ...) or "
        "the path of its Hugging Face config.json; with the server's published pool it sizes the KV "
        "cache in bytes, so right-sizing counts the weights and the KV cache in use, not the server's "
        "reservation. Default: the built-in the server's model_name label names, if any.",
    )
    kv_cache_dtype: Literal["auto", "fp8_e4m3", "fp8_e5m2", "bf16", "fp16", "fp32"] | None = setting(
        None,
        "kind sglang: the server's --kv-cache-dtype when it is not the model's own (auto). SGLang does "
        "not publish it (vLLM does), and an fp8 cache holds twice the tokens per byte.",
    )
    max_groups: int | None = setting(
        None,
        "kind redis with a group: most consumer groups the stream may have (default "
        f"{DEFAULT_MAX_GROUPS:,}); with more the groups are not read and the source is down.",
        minimum=1,
        maximum=1_000_000,
    )

    @property
    def architecture(self) -> Architecture | None:
        """The shape of ``model``; None when unset. Raises ValueError naming the entry."""
        if self.model is None:
            return None
        try:
            if self.model.strip().lower() in BUILTIN:
                return builtin(self.model)
            return from_config(self.model)
        except PlanError as exc:
            why = str(exc).removeprefix(f"--config {self.model}: ")
            raise ValueError(
                f"{self.who}: model {self.model!r} is neither a built-in ({', '.join(BUILTIN)}) nor a "
                f"Hugging Face config.json: {why}"
            ) from None

    @property
    def body_limit(self) -> int:
        if self.max_body_bytes is not None:
            return self.max_body_bytes
        return DEFAULT_MAX_BODY_BYTES["http_json" if self.kind == "http_json" else "exposition"]

    @property
    def series_limit(self) -> int:
        return DEFAULT_MAX_SERIES if self.max_series is None else self.max_series

    @property
    def series_bytes_limit(self) -> int:
        return DEFAULT_MAX_SERIES_BYTES if self.max_series_bytes is None else self.max_series_bytes

    @property
    def groups_limit(self) -> int:
        return DEFAULT_MAX_GROUPS if self.max_groups is None else self.max_groups

    @property
    def who(self) -> str:
        return f"queue {self.name!r}" if self.name else "queue (no name)"

    def validate(self) -> None:
        if not self.name:
            raise ValueError(f"{self.who}: 'name' is required")
        if not self.kind:
            raise ValueError(f"{self.who}: 'kind' is required (one of {', '.join(KINDS)})")
        if self.kind not in KINDS:
            raise ValueError(f"{self.who}: unknown kind {self.kind!r} (kinds: {', '.join(KINDS)})")
        if not self.url:
            raise ValueError(f"{self.who}: 'url' is required")
        self._check_url()
        for key, kinds in _KEYS_FOR.items():
            if getattr(self, key) not in (None, {}) and self.kind not in kinds:
                raise ValueError(f"{self.who}: '{key}' does not apply to kind {self.kind}")
        self.architecture  # noqa: B018 (raises for a model that is neither a built-in nor a config)
        if self.max_groups is not None and self.group is None:
            raise ValueError(f"{self.who}: 'max_groups' applies only with 'group'")
        required = {"prometheus": "metric", "redis": "key", "http_json": "path"}.get(self.kind)
        if required and not getattr(self, required):
            raise ValueError(f"{self.who}: kind {self.kind} needs '{required}'")
        for key in ("metric", "in_flight_metric"):
            value = getattr(self, key)
            if value is not None and not _METRIC_NAME.fullmatch(value):
                raise ValueError(f"{self.who}: '{key}' is not a metric name: {value!r}")
        for label in (*self.labels, *self.match):
            if not _LABEL_NAME.fullmatch(label) or label.startswith("__"):
                raise ValueError(f"{self.who}: {label!r} is not a valid label name")
        clash = RESERVED_LABELS.intersection(self.labels)
        if clash:
            raise ValueError(f"{self.who}: label {sorted(clash)[0]!r} is set by the exporter itself")
        self._check_headers()
        for key in ("bearer_token_file", "tls_ca_file"):
            _check_readable(self.who, key, getattr(self, key))
        _check_token(self.who, self.bearer_token_file)
        if self.basic_auth is not None:
            _check_readable(self.who, "basic_auth.password_file", self.basic_auth.password_file)

    def _check_headers(self) -> None:
        for name, value in self.headers.items():
            if not _HEADER_NAME.fullmatch(name) or name.lower() in _HEADERS_SET_BY_THE_EXPORTER:
                raise ValueError(f"{self.who}: {name!r} cannot be set in headers")
            if "\r" in value or "\n" in value:
                raise ValueError(f"{self.who}: header {name} has a line break in its value")
            if not _HEADER_VALUE.fullmatch(value):
                raise ValueError(
                    f"{self.who}: header {name} has a control character or a character outside "
                    "Latin-1 in its value (HTTP cannot carry it)"
                )
            auth = self.bearer_token_file is not None or self.basic_auth is not None
            if auth and name.lower() == "authorization":
                raise ValueError(f"{self.who}: Authorization header and bearer_token_file/basic_auth clash")

    def _check_url(self) -> None:
        parts = urlsplit(self.url)
        schemes = ("redis", "rediss", "unix") if self.kind == "redis" else ("http", "https")
        if parts.scheme not in schemes:
            raise ValueError(
                f"{self.who}: url must start with {' or '.join(s + '://' for s in schemes)}; got {self.url!r}"
            )
        if parts.scheme != "unix" and not parts.hostname:
            raise ValueError(f"{self.who}: url has no host: {self.url!r}")
        if parts.scheme in ("http", "https") and (parts.username or parts.password):
            raise ValueError(f"{self.who}: put credentials in basic_auth, not in the url")
        try:
            parts.port  # noqa: B018 (raises on a bad port)
        except ValueError:
            raise ValueError(f"{self.who}: url has a bad port: {self.url!r}") from None

    def interval_multiple(self, exporter_interval: float) -> int:
        """How many renders apart this source is polled."""
        if self.interval is None:
            return 1
        return max(1, round(self.interval / exporter_interval))

    def effective_timeout(self, exporter_interval: float) -> float:
        if self.timeout is not None:
            return self.timeout
        return min(max(self.interval_multiple(exporter_interval) * exporter_interval, 1.0), 10.0)


def _check_readable(who: str, key: str, path: str | None) -> None:
    if path is None:
        return
    try:
        checked_path(path)  # readable, and a regular file: a FIFO would stall the poller
    except OSError as exc:
        raise ValueError(f"{who}: {key} {path!r} cannot be read: {exc.strerror or exc}") from None


def _check_token(who: str, path: str | None) -> None:
    """A bearer token file must hold one: an empty one would send ``Authorization: Bearer``."""
    if path is None:
        return
    try:
        token = read_secret(path)  # what else it holds (a line break) is refused by each poll
    except OSError as exc:
        raise ValueError(f"{who}: bearer_token_file {path!r} cannot be used: {exc.strerror or exc}") from None
    if not token:
        raise ValueError(f"{who}: bearer_token_file {path!r} is empty (a bearer token is one line of text)")


def check_queue_names(entries: Sequence[QueueSettings]) -> None:
    """Names must be unique: they are the ``queue`` label."""
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if entry.name in seen:
            first = seen[entry.name]
            raise ValueError(f"queues[{i}]: duplicate queue name {entry.name!r} (also queues[{first}])")
        seen[entry.name] = i
