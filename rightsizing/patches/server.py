"""The inference server's own flags that depend on the GPU, read from a container's ``args`` (or
``command``) in the manifest, checked against the target and rewritten where the answer is
unambiguous:

- the memory the server reserves, vLLM's ``--gpu-memory-utilization`` and SGLang's
  ``--mem-fraction-static`` (a share of the GPU's memory): when that share of the target holds less
  than the engine's need for it, the share is raised to the need (to the next 0.01) if that stays
  at or under ``MOST_SHARE``; above it, a person decides (a smaller model, or keep the GPU);
- the tensor-parallel degree (vLLM ``--tensor-parallel-size``/``-tp``, SGLang ``--tp-size``/``--tp``,
  TGI ``--num-shard``) against the GPUs the container holds: a mismatch is said;
- the longest sequence (vLLM ``--max-model-len``, SGLang ``--context-length``, TGI
  ``--max-total-tokens``): one sequence of it must fit the KV cache the target leaves (the share of
  its memory less the weights), which is computed when ``--model`` names a built-in model (fp16
  weights and KV cache); when it does not fit, a person decides (the longest that fits is given).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..models import kv_bytes_per_token, served_model

SHARE = ("--gpu-memory-utilization", "--mem-fraction-static")
TP = ("--tensor-parallel-size", "-tp", "--tp-size", "--tp", "--num-shard")
LENGTH = ("--max-model-len", "--context-length", "--max-total-tokens")
MODEL = ("--model", "--model-path", "--model-id")
MOST_SHARE = 0.95  # above it, CUDA graphs and activations outside the pool run out of room
GIB = 2**30


@dataclass(frozen=True)
class Check:
    field: str  # "args" or "command": where the flags are
    value: list[str] | None  # the list rewritten (None: unchanged)
    notes: tuple[str, ...]
    manual: str | None  # why a person must decide (None: nothing to decide)


def _strings(value: Any) -> list[str] | None:
    return [str(x) for x in value] if isinstance(value, list) and len(value) < 1000 else None


def _find(words: list[str], names: tuple[str, ...]) -> tuple[int, str, str] | None:
    """(index of the value, flag, value) of the last of ``names`` in ``words``."""
    found = None
    for i, w in enumerate(words):
        flag, eq, value = w.partition("=")
        if flag in names:
            if eq:
                found = (i, flag, value)
            elif i + 1 < len(words):
                found = (i + 1, flag, words[i + 1])
    return found


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def check(
    container: dict[str, Any], gpus: int, gpu: str, memory: float, need: float | None,
    resized: tuple[int, int] | None = None,
) -> Check:  # fmt: skip
    """The container's server flags against a target of ``memory`` bytes per GPU, ``need`` bytes
    needed on it (the engine's), ``gpus`` GPUs held after the move; ``resized``: a tensor-parallel
    group's GPUs (today, after), whose degree the flag must follow."""
    field, words = "args", _strings(container.get("args")) or []
    if not any(_find(words, names) for names in (SHARE, TP, LENGTH)):
        field, words = "command", _strings(container.get("command")) or []
    notes: list[str] = []
    new = list(words)
    share_at = _find(words, SHARE)
    share = _number(share_at[2]) if share_at else None
    if share_at and share is not None and share <= 1 and need is not None and share * memory < need:
        wanted = math.ceil(need / memory * 100) / 100
        if wanted > MOST_SHARE:
            return Check(
                field,
                None,
                (),
                (
                    f"{share_at[1]} {share_at[2]} leaves {share * memory / GIB:.1f} GiB of the {gpu}'s "
                    f"{memory / GIB:.1f} GiB to a server that needs {need / GIB:.1f} GiB there, more than "
                    f"{MOST_SHARE:.0%} of it: by hand (a smaller model or context, or keep today's GPU)"
                ),
            )
        i, flag, _ = share_at
        new[i] = f"{flag}={wanted:.2f}" if "=" in words[i] else f"{wanted:.2f}"
        held = f"{share:g} of the {gpu}'s {memory / GIB:.1f} GiB would hold {share * memory / GIB:.1f} GiB"
        notes.append(f"{flag} {share_at[2]} -> {wanted:.2f}: {held} of the {need / GIB:.1f} GiB needed")
        share = wanted
    tp_at = _find(words, TP)
    tp = _number(tp_at[2]) if tp_at else None
    if resized is not None:
        if tp_at is None or tp is None or int(tp) != resized[0]:
            said = f"{tp_at[1]} {tp_at[2]}" if tp_at else "no tensor-parallel size in its args"
            return Check(field, None, (), (
                f"its {resized[0]} GPUs become {resized[1]}, and the server says {said}: by hand, set its "
                f"parallelism to {resized[1]} with the GPUs"))  # fmt: skip
        i, flag, _ = tp_at
        new[i] = f"{flag}={resized[1]}" if "=" in words[i] else str(resized[1])
        notes.append(f"{flag} {resized[0]} -> {resized[1]}, with its GPUs")
        tp = resized[1]
    elif tp_at and tp is not None and int(tp) != gpus:
        notes.append(f"{tp_at[1]} {tp_at[2]} while the container holds {gpus} GPU{'s' if gpus > 1 else ''}: "
                     "the server's parallelism and its GPUs differ already")  # fmt: skip
    if (length_at := _find(words, LENGTH)) is not None:
        manual = _length(words, length_at, share or 0.9, memory, max(1, int(tp or 1)), gpu, notes)
        if manual:
            return Check(field, None, (), manual)
    return Check(field, new if new != words else None, tuple(notes), None)


def _length(words: list[str], at: tuple[int, str, str], share: float, memory: float, tp: int, gpu: str,
            notes: list[str]) -> str | None:  # fmt: skip
    model_at = _find(words, MODEL)
    arch = served_model(model_at[2]) if model_at else None
    length = _number(at[2])
    if arch is None or length is None:
        named = model_at[2] if model_at else "not named"
        notes.append(f"{at[1]} {at[2]} not checked against the {gpu}'s KV cache: the model ({named}) is "
                     "not a built-in one, so its KV bytes per token are not known")  # fmt: skip
        return None
    per_token = kv_bytes_per_token(arch, 2.0) / tp
    pool = share * memory - arch.params * 2.0 / tp
    if length * per_token <= pool:
        return None
    longest = max(0, int(pool // per_token))
    takes = f"one sequence of {arch.name} takes {length * per_token / GIB:.1f} GiB of KV cache (fp16)"
    left = f"the {gpu} leaves {max(pool, 0) / GIB:.1f} GiB after the weights at a {share:g} share"
    fix = f"by hand, lower it to {longest} tokens or less, or keep today's GPU"
    return f"{at[1]} {at[2]}: {takes}, and {left}: {fix}"
