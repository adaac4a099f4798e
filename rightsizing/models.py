"""Model architectures for ``rightsizer plan``: a small built-in table, Hugging Face ``config.json``
files read from disk (never downloaded), or an estimate from the parameter count alone."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rightsizer_core.files import MAX_CONFIG_BYTES, read_text

from .model_params import ShapeError, count


class PlanError(Exception):
    """Input ``rightsizer plan`` cannot work with; the message says what and how to fix it."""


@dataclass(frozen=True, slots=True)
class Architecture:
    name: str
    params: float  # total parameters
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int = 32000
    intermediate: int = 0  # MLP width (0: 4 x hidden)
    active_params: float | None = None  # mixture of experts: parameters read per token
    estimated: bool = False  # shape guessed from the parameter count (no architecture given)
    max_context: int | None = None
    tied_embeddings: bool = False  # the output layer shares the input embedding matrix
    kv_latent: int = 0  # multi-head latent attention: elements cached per token and layer

    @property
    def params_per_token(self) -> float:
        return self.active_params or self.params


def _arch(
    name: str,
    params: float,
    layers: int,
    hidden: int,
    heads: int,
    kv: int,
    vocab: int,
    intermediate: int,
    head_dim: int | None = None,
    active: float | None = None,
    context: int | None = None,
    tied: bool = False,
) -> Architecture:
    return Architecture(
        name,
        params,
        layers,
        hidden,
        heads,
        kv,
        head_dim or hidden // heads,
        vocab,
        intermediate,
        active,
        False,
        context,
        tied,
    )


# Published shapes (each model's config.json on its Hugging Face model card).
BUILTIN: dict[str, Architecture] = {
    a.name: a
    for a in (
        _arch("llama-2-7b", 6.74e9, 32, 4096, 32, 32, 32000, 11008, context=4096),
        _arch("llama-2-13b", 13.0e9, 40, 5120, 40, 40, 32000, 13824, context=4096),
        _arch("llama-2-70b", 69.0e9, 80, 8192, 64, 8, 32000, 28672, context=4096),
        _arch("llama-3-8b", 8.03e9, 32, 4096, 32, 8, 128256, 14336, context=8192),
        _arch("llama-3-70b", 70.6e9, 80, 8192, 64, 8, 128256, 28672, context=8192),
        _arch("llama-3.1-8b", 8.03e9, 32, 4096, 32, 8, 128256, 14336, context=131072),
        _arch("llama-3.1-70b", 70.6e9, 80, 8192, 64, 8, 128256, 28672, context=131072),
        _arch("llama-3.1-405b", 405.9e9, 126, 16384, 128, 8, 128256, 53248, context=131072),
        _arch("mistral-7b", 7.24e9, 32, 4096, 32, 8, 32000, 14336, context=32768),
        _arch("mixtral-8x7b", 46.7e9, 32, 4096, 32, 8, 32000, 14336, active=12.9e9, context=32768),
        _arch("qwen2.5-7b", 7.62e9, 28, 3584, 28, 4, 152064, 18944, context=32768),
        _arch("qwen2.5-72b", 72.7e9, 80, 8192, 64, 8, 152064, 29568, context=32768),
        _arch("gemma-2-9b", 9.24e9, 42, 3584, 16, 8, 256000, 14336, head_dim=256, context=8192,
              tied=True),
        _arch("phi-3-mini", 3.82e9, 32, 3072, 32, 32, 32064, 8192, context=4096),
    )
}

# What a server's model name may carry after the model itself (Hugging Face ids:
# "meta-llama/Meta-Llama-3-8B-Instruct", "mistralai/Mistral-7B-Instruct-v0.3", "Qwen2.5-7B-Instruct-AWQ").
_SERVED_SUFFIX = re.compile(
    r"instruct|chat|hf|it|base|[0-9]+k|v[0-9]+(\.[0-9]+)*|fp8|awq|gptq|int4|int8|w4a16|w8a8|dynamic|bnb|4bit"
)


def served_model(name: str) -> Architecture | None:
    """The built-in a server's model name names (its Hugging Face id, with the organisation and the
    usual suffixes: ``-Instruct``, ``-chat-hf``, ``-v0.3``, ``-AWQ``), else None: a served name the
    table does not know is never guessed from."""
    base = name.strip().lower().rsplit("/", 1)[-1].removeprefix("meta-")
    parts = base.split("-")
    while len(parts) > 1 and _SERVED_SUFFIX.fullmatch(parts[-1]):
        parts.pop()
    return BUILTIN.get("-".join(parts))


def kv_elements_per_token(arch: Architecture, gpus: int = 1) -> int:
    """KV-cache elements one token takes on each of ``gpus`` tensor-parallel GPUs: 2 (K and V) x
    layers x KV heads x head dim (vLLM's page sizing), KV heads split over the GPUs and replicated
    when fewer than them; multi-head latent attention caches one latent per layer
    (``kv_latent``), which every GPU keeps whole."""
    if arch.kv_latent:
        return arch.layers * arch.kv_latent
    return 2 * arch.layers * math.ceil(arch.kv_heads / gpus) * arch.head_dim


def kv_bytes_per_token(arch: Architecture, dtype_bytes: float) -> float:
    """KV-cache bytes one token takes on one GPU holding every layer and KV head."""
    return kv_elements_per_token(arch) * dtype_bytes


_PARAMS = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbt])?\s*$", re.IGNORECASE)
_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


def parse_params(text: str) -> float:
    """'7e9', '7B', '7b', '1.5B', '350M', '7000000000', '7_000_000_000' -> parameters."""
    m = _PARAMS.match(text.replace("_", "").replace(",", ""))
    if m is None:
        raise PlanError(f"--params {text!r} is not a parameter count (examples: 7e9, 7B, 7000000000)")
    value = float(m.group(1)) * _SUFFIX[(m.group(2) or "").lower()]
    if math.isnan(value) or value < 1e6:
        raise PlanError(f"--params {text!r}: a model needs at least a million parameters")
    if value > 1e14:  # infinity included (1e300B)
        raise PlanError(f"--params {text!r}: more than 100 trillion parameters is not a real model")
    return value


def builtin(name: str) -> Architecture:
    """A built-in by its name, or by a Hugging Face id that names one (``served_model``:
    ``meta-llama/Llama-3.1-8B-Instruct`` is ``llama-3.1-8b``); the id is kept in the name shown."""
    found = BUILTIN.get(name.strip().lower())
    if found is not None:
        return found
    matched = served_model(name)
    if matched is not None:
        return replace(matched, name=f"{matched.name} ({name.strip()})")
    hub = " (the planner never downloads: give the Hub model's config.json)" if "/" in name else ""
    raise PlanError(
        f"--model {name!r} is not in the built-in table (known: {', '.join(BUILTIN)}); "
        f"use --config with the model's config.json{hub} or --params"
    )


def estimate(params: float) -> Architecture:
    """A Llama-shaped guess from the parameter count: params ~ 12 x layers x hidden^2 with
    layers = hidden / 128, full multi-head attention (no grouped-query saving: conservative)."""
    hidden = max(512, round((params * 128 / 12) ** (1 / 3) / 512) * 512)
    layers = max(1, round(params / (12 * hidden * hidden)))
    heads = max(1, hidden // 128)
    name = f"{params / 1e9:g}B-parameter model"
    return Architecture(name, params, layers, hidden, heads, heads, 128, 32000, 0, None, True, None)


MAX_SHAPE = 10**9  # no dimension, layer, head or vocabulary count of a real model comes near


def _int(cfg: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if value is None:
        raise PlanError(f"{where}: missing {key!r}; is this a transformer config.json?")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise PlanError(f"{where}: {key!r} must be a positive integer; got {_shown(value)}")
    if value > MAX_SHAPE:
        raise PlanError(f"{where}: {key!r} must be at most {MAX_SHAPE:,}; got {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"


def config_file(path: str) -> Path:
    """``path`` itself, or the ``config.json`` inside it when it is a model directory."""
    given = Path(path)
    return given / "config.json" if given.is_dir() else given


def model_name(cfg: dict[str, Any], file: Path) -> str:
    """The Hub id the config names (``_name_or_path``), else the model directory's own name."""
    named = str(cfg.get("_name_or_path") or "").strip()
    if named and not named.startswith(("/", ".", "~")) and "\\" not in named:  # not a local path
        return named
    return file.resolve().parent.name or file.name


def from_config(path: str) -> Architecture:
    """Shape and parameter count of a Hugging Face config.json, or of the config.json in a model
    directory, counted as its architecture builds its layers (``model_params``: dense, and the
    mixtures of experts of Mixtral, Qwen2/3-MoE and DeepSeek-V2/V3 with their active parameters)."""
    file = config_file(path)
    try:
        cfg = json.loads(read_text(file, MAX_CONFIG_BYTES))
    except OSError as exc:
        inside = "" if file == Path(path) else f" {file}"
        raise PlanError(f"--config {path}: cannot read{inside}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise PlanError(f"--config {path}: not valid JSON at line {exc.lineno}: {exc.msg}") from None
    except (RecursionError, ValueError) as exc:  # nested too deep; an integer of over 4300 digits
        why = "nested too deep" if isinstance(exc, RecursionError) else str(exc)
        raise PlanError(f"--config {path}: not valid JSON: {why}") from None
    if not isinstance(cfg, dict):
        raise PlanError(f"--config {path}: must be a JSON object")
    if isinstance(cfg.get("text_config"), dict):  # multimodal wrappers keep the language model here
        cfg = {
            **cfg["text_config"],
            "model_type": cfg["text_config"].get("model_type", cfg.get("model_type")),
        }
    layers = _int(cfg, "num_hidden_layers", path)
    hidden = _int(cfg, "hidden_size", path)
    heads = _int(cfg, "num_attention_heads", path)
    kv = _int(cfg, "num_key_value_heads", path, heads)
    head_dim = (
        _int(cfg, "head_dim", path, hidden // heads) if cfg.get("head_dim") is not None else hidden // heads
    )
    vocab = _int(cfg, "vocab_size", path, 32000)
    if heads % kv:
        raise PlanError(f"{path}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}")
    tied = bool(cfg.get("tie_word_embeddings", True))  # Hugging Face's default: tied
    try:
        counted = count(
            cfg, lambda key, default: _int(cfg, key, path, default), layers=layers, hidden=hidden,
            heads=heads, kv=kv, head_dim=head_dim, vocab=vocab, tied=tied,
        )  # fmt: skip
    except ShapeError as exc:
        raise PlanError(f"--config {path}: {exc}") from None
    total, active = counted.total, counted.active
    if total > 1e14:
        raise PlanError(f"--config {path}: {total:.3g} parameters; over 100 trillion is not a real model")
    name = model_name(cfg, file)
    context = cfg.get("max_position_embeddings")
    return Architecture(
        name,
        total,
        layers,
        hidden,
        heads,
        kv,
        head_dim,
        vocab,
        counted.mlp_width,
        active,
        False,
        context if isinstance(context, int) else None,
        tied,
        counted.kv_latent,
    )
