"""An inference server's KV-cache pool in bytes: vLLM's ``vllm:cache_config_info`` labels, SGLang's
``sglang:max_total_num_tokens``.

vLLM reserves ``--gpu-memory-utilization`` of the GPU (0.9 by default) and gives the KV cache what
the weights, activations and CUDA graphs leave of it: ``num_gpu_blocks`` blocks of ``block_size``
tokens (the labels of ``vllm:cache_config_info``, one series per engine). A token takes 2 (K and V)
x layers x KV heads x head dim x the cache dtype's bytes, which needs the model's shape: the queue's
``model`` setting, else the built-in that the server's ``model_name`` label names
(``rightsizing.models.served_model``). A tensor-parallel group holds each block across its GPUs,
so the pool counted this way is the whole server's, over all of its GPUs.

The pool is what makes a reservation a need: what the work holds is the reservation less the part
of the pool its KV-cache usage leaves free (``rightsizing.pressure.memory_need``). Nothing is
guessed: an unknown model, a missing or malformed label gives no pool, and the reservation stays
the need.

SGLang reserves ``--mem-fraction-static`` (0.88 on most GPUs) and publishes its pool in tokens,
``sglang:max_total_num_tokens`` (one series per rank: a tensor-parallel group holds every token
across its ranks, so the largest is the server's). It does not publish its ``--kv-cache-dtype``:
the queue's ``kv_cache_dtype`` says it when it is not the model's own (``auto``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rightsizing.models import Architecture, kv_bytes_per_token, served_model

CACHE_INFO = "vllm:cache_config_info"
MAX_BLOCKS = 10**9  # far above any GPU's: 192 GiB of 16-token blocks of 128 KiB tokens is ~100,000
MAX_BLOCK_SIZE = 2**16


def dtype_bytes(cache_dtype: str) -> float:
    """Bytes per element of vLLM's ``--kv-cache-dtype``: ``auto`` is the model's dtype, 16-bit for
    every checkpoint a server runs (fp8 and int4 checkpoints keep 16-bit activations)."""
    name = cache_dtype.strip().lower()
    if "fp8" in name:
        return 1.0
    if name in ("fp32", "float32", "float"):
        return 4.0
    return 2.0


def _count(text: str | None, most: int) -> int | None:
    # ASCII digits only: str.isdigit also accepts '²' and other digits int() refuses
    if text is None or not (text.strip().isascii() and text.strip().isdigit()):
        return None
    value = int(text.strip()[:12])
    return value if 0 < value <= most else None


def pool_bytes(infos: Iterable[Mapping[str, str]], arch: Architecture | None) -> float | None:
    """The pool over every engine's ``cache_config_info`` labels; None when any is unusable."""
    if arch is None:
        return None
    total, seen = 0.0, False
    for info in infos:
        blocks = _count(info.get("num_gpu_blocks"), MAX_BLOCKS)
        size = _count(info.get("block_size"), MAX_BLOCK_SIZE)
        if blocks is None or size is None:
            return None
        total += blocks * size * kv_bytes_per_token(arch, dtype_bytes(info.get("cache_dtype", "auto")))
        seen = True
    return total if seen else None


def token_pool_bytes(tokens: float | None, cache_dtype: str, arch: Architecture | None) -> float | None:
    """A pool published in tokens (SGLang's ``sglang:max_total_num_tokens``), in bytes."""
    if arch is None or tokens is None or not 0 < tokens <= MAX_BLOCKS * MAX_BLOCK_SIZE:
        return None
    return tokens * kv_bytes_per_token(arch, dtype_bytes(cache_dtype))


def architecture(configured: Architecture | None, model_name: str | None) -> Architecture | None:
    """The queue's configured model, else the built-in the server's ``model_name`` names."""
    if configured is not None:
        return configured
    return served_model(model_name) if model_name else None
