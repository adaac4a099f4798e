"""Generate the reference tables in ``docs/`` from the code, so they cannot drift.

``python -m exporter.docs`` rewrites the marked sections of the documents that hold them
(``LOCATIONS``); the test suite fails when a document differs from what this module generates.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from rightsizer_core.settings import describe_settings

from .config import ExporterConfig
from .metrics import FAMILIES


def cell(value: object) -> str:
    """A table cell's text with its pipes escaped (``str | None``), which would otherwise end the
    cell on GitHub; pipes already escaped stay as they are."""
    return re.sub(r"(?<!\\)\|", r"\\|", str(value))


def metrics_table() -> str:
    rows = ["| metric | type | unit | labels | description |", "|---|---|---|---|---|"]
    for f in FAMILIES:
        name = f"`{f.name}`" + (" (dcgm-exporter)" if f.dcgm else "")
        rows.append(f"| {name} | {cell(f.type)} | {cell(f.unit)} | {cell(f.labels_doc)} | {cell(f.help)} |")
    return "\n".join(rows)


def config_table() -> str:
    rows = ["| key | type | default | environment | description |", "|---|---|---|---|---|"]
    for key, type_name, default, doc in describe_settings(ExporterConfig):
        scalar = "list" not in type_name and "dict" not in type_name
        env = "RIGHTSIZER_" + key.upper().replace(".", "_") if scalar else "—"
        rows.append(f"| `{cell(key)}` | {cell(type_name)} | `{cell(default)}` | `{env}` | {cell(doc)} |")
    return "\n".join(rows)


def queue_table() -> str:
    from .sources.queues.settings import QueueSettings

    rows = ["| key | type | default | description |", "|---|---|---|---|"]
    for key, type_name, default, doc in describe_settings(QueueSettings):
        rows.append(f"| `{cell(key)}` | {cell(type_name)} | `{cell(default)}` | {cell(doc)} |")
    return "\n".join(rows)


def versions_table() -> str:
    from .sources.queues.versions import rows as version_rows

    out = ["| kind | reads | name | seen in | page in the tests |", "|---|---|---|---|---|"]
    for kind, role, name, versions, page in version_rows():
        where = f"`{page}`" if page else "—"
        out.append(f"| `{kind}` | {role} | `{name}` | {cell(versions)} | {where} |")
    return "\n".join(out)


def price_sets_table() -> str:
    """One row per price set in rightsizing/prices/: what it prices and how old its sources are."""
    from rightsizing.catalog import builtin_gpus
    from rightsizing.price_sets import PRICES_DIR, available, read_price_set

    keys = [g.key for g in builtin_gpus()]
    out = [
        "| `catalog.price_set` | provider | pricing | region | GPUs priced | sources dated |",
        "|---|---|---|---|---|---|",
    ]
    for name in available()[1:]:
        s = read_price_set(PRICES_DIR / f"{name}.yaml", keys)
        gpus = ", ".join(k for k in keys if k in s.entries)  # in the catalog's order
        dates = sorted({e.as_of for e in s.entries.values()})
        dated = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
        out.append(f"| `{name}` | {s.provider} | {s.pricing} | {s.region} | {cell(gpus)} | {dated} |")
    return "\n".join(out)


SECTIONS: dict[str, Callable[[], str]] = {
    "metrics-table": metrics_table,
    "config-table": config_table,
    "queue-table": queue_table,
    "versions-table": versions_table,
    "price-sets-table": price_sets_table,
}


# Which document holds each generated section, relative to the repository root.
LOCATIONS: dict[str, str] = {
    "metrics-table": "docs/metrics.md",
    "config-table": "docs/configuration.md",
    "queue-table": "docs/queues.md",
    "versions-table": "docs/queues.md",
    "price-sets-table": "docs/rightsizing.md",
}


def render(text: str, names: list[str]) -> str:
    """``text`` with the named generated sections rewritten; each must be marked in it."""
    for name in names:
        pattern = re.compile(rf"(<!-- {name}:begin -->\n).*?(<!-- {name}:end -->)", re.S)
        if not pattern.search(text):
            raise ValueError(f"no <!-- {name}:begin --> … <!-- {name}:end --> section")
        replacement = r"\g<1>" + SECTIONS[name]().replace("\\", "\\\\") + "\n" + r"\g<2>"
        text = pattern.sub(replacement, text)
    return text


def documents() -> dict[str, list[str]]:
    """Each document holding generated sections, with the names of its sections."""
    found: dict[str, list[str]] = {}
    for name, path in LOCATIONS.items():
        found.setdefault(path, []).append(name)
    return found


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".")
    for relative, names in documents().items():
        path = root / relative
        path.write_text(render(path.read_text(), names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
