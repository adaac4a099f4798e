"""``rightsizer plan``: arguments and output (the maths is in ``planner``)."""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import time
from typing import Any

from ..catalog import Catalog
from ..models import Architecture, PlanError, builtin, estimate, from_config, parse_params
from ..planner import (
    HEADROOM_RULE,
    KV_CACHE_BYTES,
    OPTIMIZER_BYTES,
    PRECISION_BYTES,
    Plan,
    Workload,
    frontier,
    plan,
)
from .output import gib, money, pct, rate, table, to_csv, to_json
from .plan_measured import Measured, measure, measured_dict, projected, render_measured
from .promapi import ReportError, add_auth_arguments, auth_headers, credentials_of

ESTIMATE_MARK = "*"


def add_arguments(p: argparse.ArgumentParser) -> None:
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--params", metavar="N", help="parameter count: 7e9, 7B, 7000000000")
    which.add_argument("--model", metavar="NAME", help="a built-in architecture, e.g. llama-3-8b")
    which.add_argument(
        "--config", metavar="PATH", help="a Hugging Face config.json, or the model directory holding it"
    )
    p.add_argument("--precision", default="bf16", help=f"{'|'.join(PRECISION_BYTES)} (default bf16)")
    p.add_argument(
        "--kv-cache-dtype",
        default="auto",
        help=f"inference: the KV cache's dtype, auto|{'|'.join(KV_CACHE_BYTES)} (default auto: the "
        "model's dtype, as vLLM's --kv-cache-dtype auto; fp8 and int4 weights still cache in 16 bits)",
    )
    p.add_argument("--mode", default="inference", help="inference|training (default inference)")
    p.add_argument(
        "--optimizer",
        default=None,
        help=f"training optimizer: {'|'.join(OPTIMIZER_BYTES)} (default adamw, mixed precision)",
    )
    p.add_argument(
        "--context",
        type=_tokens,
        default=4096,
        help="tokens per sequence: 8192, 32k, 128k (k = 1024 and m = 1024 x 1024, as a model card's "
        "'128K context' is 131,072 positions; vLLM's --max-model-len reads a lower-case 128k as "
        "128,000); default 4096",
    )
    p.add_argument("--batch", type=_int("--batch"), default=1, help="concurrent sequences (default 1)")
    p.add_argument("--gpus", type=_int("--gpus"), default=1, help="tensor-parallel GPUs (default 1)")
    p.add_argument("--checkpointing", action="store_true", help="training with activation checkpointing")
    p.add_argument(
        "--all",
        action="store_true",
        help="list every viable option, not only those no other beats on price and speed",
    )
    p.add_argument("--format", choices=["table", "json", "csv"], default="table")
    p.add_argument(
        "--measured-from",
        metavar="URL",
        help="Prometheus holding the exporter's series: show the workload's measured throughput and "
        "cost, projected on each option (needs --workload)",
    )
    p.add_argument(
        "--workload",
        metavar="NS/NAME",
        help="the measured workload: namespace/workload of its queues and pods, or a queue name",
    )
    add_auth_arguments(p, "the --measured-from Prometheus")


def _int(flag: str) -> Any:
    def parse(text: str) -> int:
        try:
            return int(text.replace("_", "").replace(",", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a whole number; got {text!r}") from None

    return parse


_TOKENS = re.compile(r"([0-9]+(?:\.[0-9]+)?)([kKmM])")
TOKEN_SUFFIX = {"k": 1024, "m": 1024 * 1024}


def _tokens(text: str) -> int:
    """'131072', '131_072', '128k', '128K', '1m' -> tokens (k = 1024: '128k' is 131,072)."""
    m = _TOKENS.fullmatch(text.strip())
    if m is None:
        return int(_int("--context")(text))
    value = float(m.group(1)) * TOKEN_SUFFIX[m.group(2).lower()]
    if value != int(value):
        raise argparse.ArgumentTypeError(f"--context {text!r} is not a whole number of tokens")
    return int(value)


def architecture(args: argparse.Namespace) -> Architecture:
    if args.model:
        return builtin(args.model)
    if args.config:
        return from_config(args.config)
    return estimate(parse_params(args.params))


def main(args: argparse.Namespace, catalog: Catalog) -> int:
    """Print the plan; exit 2 (with the reason on stderr) when no GPU holds the workload."""
    text, result = run(args, catalog)
    sys.stdout.write(text)
    if result.options:
        return 0
    reason = next(n for n in result.notes if n.startswith("no catalog GPU holds"))
    print(f"rightsizer: {reason}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace, catalog: Catalog) -> tuple[str, Plan]:
    arch = architecture(args)
    if args.optimizer is not None and args.mode != "training":
        raise PlanError("--optimizer only applies to --mode training")
    w = Workload(
        args.mode,
        args.precision.lower(),
        (args.optimizer or "adamw").lower(),
        args.context,
        args.batch,
        args.gpus,
        args.checkpointing,
        args.kv_cache_dtype.lower(),
    )
    if bool(args.measured_from) != bool(args.workload):
        raise PlanError("--measured-from and --workload go together")
    if (args.header or args.bearer_token_file) and not args.measured_from:
        raise PlanError("--header and --bearer-token-file go with --measured-from")
    try:
        headers = auth_headers(args)
    except ReportError as exc:
        raise PlanError(str(exc)) from None
    result = plan(arch, w, catalog)
    measured = None
    if args.measured_from:
        measured = measure(
            args.measured_from,
            args.workload,
            catalog,
            time.time(),
            headers=headers,
            credentials=credentials_of(args),
        )
    if not args.all:
        best = frontier(result.options)
        hidden = len(result.options) - len(best)
        note = (
            f"{hidden} more viable option{'s are' if hidden > 1 else ' is'} no cheaper and no faster "
            "than one listed (--all lists them)"
        )
        result = dataclasses.replace(
            result, options=best, notes=(*result.notes, note) if hidden else result.notes
        )
    if args.format == "json":
        named = {"price_set": {"name": catalog.price_set, "description": catalog.price_set_description}}
        return to_json({**as_dict(result, measured), **named}), result
    if args.format == "csv":
        return to_csv(*option_rows(result, raw=True, measured=measured)), result
    prices = f"Prices: {catalog.price_set}, {catalog.price_set_description} (catalog.price_set).\n"
    return render(result, measured is not None) + prices + render_measured(result, measured), result


def as_dict(r: Plan, measured: Measured | None = None) -> dict[str, Any]:
    a, w = r.model, r.workload
    headers, rows = option_rows(r, raw=True, measured=measured)
    return {
        "model": {
            "name": a.name,
            "params": a.params,
            "active_params": a.active_params,
            "layers": a.layers,
            "hidden_size": a.hidden,
            "attention_heads": a.heads,
            "kv_heads": a.kv_heads,
            "head_dim": a.head_dim,
            "kv_latent": a.kv_latent or None,
            "vocab_size": a.vocab,
            "estimated": a.estimated,
        },
        "workload": {
            "mode": w.mode,
            "precision": w.precision,
            "optimizer": w.optimizer if w.mode == "training" else None,
            "context": w.context,
            "batch": w.batch,
            "gpus": w.gpus,
            "checkpointing": w.checkpointing,
            "kv_cache_dtype": w.kv_dtype if w.mode == "inference" else None,
            "kv_cache_dtype_asked": w.kv_cache_dtype if w.mode == "inference" else None,
        },
        "memory_per_gpu_bytes": {**{k: v for k, v in r.memory.items()}, "total": r.memory.total},
        "headroom_rule": HEADROOM_RULE,
        "fits_with_gpus": r.fits_with_gpus,
        "options": [dict(zip(headers, row, strict=True)) for row in rows],
        "notes": list(r.notes),
        "measured": None if measured is None else measured_dict(measured),
    }


def option_rows(r: Plan, raw: bool, measured: Measured | None = None) -> tuple[list[str], list[list[Any]]]:
    unit = "decode" if r.workload.mode == "inference" else "training"
    headers = [
        "gpu",
        "gpus",
        "memory_bytes",
        "usable_memory_bytes",
        "need_bytes",
        "headroom_ratio",
        "hourly_price_dollars",
        f"{unit}_tokens_per_second_ceiling",
        "dollars_per_million_tokens",
        "price_estimated",
        "price_source",
    ]
    rows = [
        [
            o.candidate.key,
            o.gpus,
            o.candidate.memory_bytes,
            o.candidate.usable_memory,
            round(r.memory.total),
            round(o.headroom_ratio, 4),
            round(o.hourly_price_dollars, 4),
            round(o.tokens_per_second, 2),
            None if o.dollars_per_million_tokens is None else round(o.dollars_per_million_tokens, 4),
            o.candidate.price_estimated,
            o.candidate.price_source,
        ]
        for o in r.options
    ]
    if measured is not None:
        per = "million_tokens" if measured.unit == "tokens" else "thousand_requests"
        headers += [f"measured_projected_{measured.unit}_per_second", f"measured_projected_dollars_per_{per}"]
        for o, row in zip(r.options, rows, strict=True):
            rate, dollars = projected(measured, o)
            row += [None if rate is None else round(rate, 2), None if dollars is None else round(dollars, 4)]
        if measured.slo is not None and measured.slo.judged:
            headers.append("measured_projected_slo_latency_ratio")
            for o, row in zip(r.options, rows, strict=True):
                latency = measured.latency(o.candidate, o.gpus)
                row.append(None if latency is None else round(latency, 4))
    return headers, rows


def render(r: Plan, measured: bool = False) -> str:
    a, w = r.model, r.workload
    shape = (
        f"{a.params / 1e9:.2f} B parameters"
        + (f" ({a.active_params / 1e9:.1f} B active)" if a.active_params else "")
        + f"; {a.layers} layers, hidden {a.hidden}, {a.heads} heads, "
        + (
            f"latent attention caching {a.kv_latent} values per token and layer"
            if a.kv_latent
            else f"{a.kv_heads} KV heads, head dim {a.head_dim}"
        )
    )
    what = f"{w.mode}, {w.precision}"
    if w.mode == "training":
        what += f", {w.optimizer}" + (", activation checkpointing" if w.checkpointing else "")
    else:
        auto = " (--kv-cache-dtype auto: the model's dtype, the servers' default)"
        what += f" weights, KV cache {w.kv_dtype}" + (auto if w.kv_cache_dtype == "auto" else "")
    what += f", context {w.context:,}, batch {w.batch}, {w.gpus} GPU{'s' if w.gpus > 1 else ''}"
    out = [f"Model     {a.name}: {shape}" + (" (estimated)" if a.estimated else ""), f"Workload  {what}", ""]
    per = " per GPU" if w.gpus > 1 else ""
    out.append(
        table(
            ["memory" + per, "size"],
            [[k.replace("_", " "), gib(v, 2)] for k, v in r.memory.items() if v]
            + [["total", gib(r.memory.total, 2)]],
            [False, True],
        )
    )
    out.append("")
    if r.options:
        kind = "decode" if w.mode == "inference" else "training"
        out.append(
            table(
                [
                    "viable GPU",
                    "usable memory",
                    "headroom",
                    f"{kind} tok/s ceiling",
                    "$/hour",
                    "$/M tokens at ceiling",
                ],
                [
                    [
                        (f"{w.gpus} x " if w.gpus > 1 else "") + o.candidate.key,
                        gib(o.candidate.usable_memory, 1),
                        pct(o.headroom_ratio),
                        rate(o.tokens_per_second),
                        _priced(o.hourly_price_dollars, 2, o.candidate.price_estimated),
                        _priced(o.dollars_per_million_tokens, 3, o.candidate.price_estimated),
                    ]
                    for o in r.options
                ],
                [False, True, True, True, True, True],
            )
        )
        ceiling = f"at batch {w.batch} (--batch)" if kind == "decode" else "at full compute"
        out.append(
            f"$/M tokens at ceiling: the price over the {kind} ceiling {ceiling}, a floor on what the "
            "tokens cost" + ("; not a measurement: the measured cost is below" if measured else "")
        )
        if any(o.candidate.price_estimated for o in r.options):
            out.append(
                f"{ESTIMATE_MARK} estimated price: no public list price for that GPU (how it was derived: "
                "price_source in --format json; set what you pay in catalog.prices)"
            )
        best = min(
            (o for o in r.options if o.dollars_per_million_tokens),
            default=None,
            key=lambda o: o.dollars_per_million_tokens or 0.0,
        )
        if best is not None:
            out.append(
                f"\nLowest cost per token: {(f'{w.gpus} x ' if w.gpus > 1 else '') + best.candidate.key} at "
                f"{money(best.dollars_per_million_tokens, 3)} per million tokens "
                + ("(an estimated price; " if best.candidate.price_estimated else "(")
                + "from the ceiling: real serving costs more)."
            )
    out.append(f"Headroom rule: {HEADROOM_RULE}.")
    out += [f"Note: {n}" for n in r.notes]
    return "\n".join(out) + "\n"


def _priced(value: float | None, digits: int, estimated: bool) -> str:
    text = money(value, digits)
    return text + ESTIMATE_MARK if estimated and value is not None else text
