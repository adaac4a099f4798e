"""Parameters of a Hugging Face ``config.json``, counted as each architecture's modelling code builds
its layers (dense Llama-style, and the mixtures of experts: Mixtral, Qwen2-MoE, Qwen3-MoE,
DeepSeek-V2/V3 with multi-head latent attention).

Per layer:
- attention: grouped-query, q and o ``hidden x heads x head_dim``, k and v ``hidden x kv_heads x
  head_dim``. DeepSeek's multi-head latent attention (MLA, ``kv_lora_rank`` given) instead
  projects q through ``q_lora_rank`` when given, compresses K and V into one latent of
  ``kv_lora_rank`` plus a shared rotary key of ``qk_rope_head_dim`` (``kv_a_proj_with_mqa``),
  expands it per head (``kv_b_proj``: ``kv_lora_rank x heads x (qk_nope_head_dim + v_head_dim)``)
  and projects ``heads x v_head_dim`` back;
- MLP: gated (gate, up, down: 3 x hidden x width) unless the model type is one of the old
  two-matrix ones. A mixture-of-experts layer holds its routed experts (``num_local_experts``,
  ``num_experts`` or ``n_routed_experts``), each ``moe_intermediate_size`` wide (Mixtral: its
  ``intermediate_size``), its shared experts (Qwen2-MoE: one ``shared_expert_intermediate_size``
  wide plus its 1-output gate; DeepSeek: ``n_shared_experts`` of ``moe_intermediate_size``) and a
  router (hidden x routed experts). Which layers are sparse: DeepSeek, from
  ``first_k_dense_replace`` on, every ``moe_layer_freq``-th; Qwen, every ``decoder_sparse_step``-th
  (counting from 1) not in ``mlp_only_layers``; the others, every layer. Dense layers use
  ``intermediate_size``.

Embeddings: ``vocab x hidden``, twice unless tied. Active parameters (read per token): attention,
dense MLPs, the ``num_experts_per_tok`` routed experts, the shared experts, routers and both
embedding matrices, the convention of Mistral's and Qwen's model cards (DeepSeek's cards leave the
input embedding out). Norms and biases are left out (under 0.01 %). DeepSeek-V3's multi-token
prediction layer (``num_nextn_predict_layers``) is not counted: servers load it only for
speculative decoding.

KV cache: MLA caches, per token and layer, the latent and the rotary key
(``kv_lora_rank + qk_rope_head_dim`` elements, DeepSeek-V2 paper section 2.1.2), not K and V per
head."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Read = Callable[[str, "int | None"], int]  # a positive integer of the config (key, default)
TWO_MATRIX_MLP = ("gpt2", "gpt_neox", "opt", "bloom", "falcon", "gptj")
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")


class ShapeError(ValueError):
    """A config whose mixture-of-experts keys contradict each other."""


@dataclass(frozen=True, slots=True)
class Counted:
    total: float
    active: float | None  # None: a dense model, every parameter is read per token
    mlp_width: int  # the MLP width one token passes through (activations)
    kv_latent: int  # MLA: elements cached per token and layer; 0: K and V per KV head


def _present(cfg: dict[str, Any], key: str) -> bool:
    return cfg.get(key) is not None


def attention(cfg: dict[str, Any], read: Read, hidden: int, heads: int, kv: int, head_dim: int) -> int:
    if not _present(cfg, "kv_lora_rank"):
        return hidden * heads * head_dim * 2 + hidden * kv * head_dim * 2
    latent, rope = read("kv_lora_rank", None), read("qk_rope_head_dim", None)
    nope, v = read("qk_nope_head_dim", None), read("v_head_dim", None)
    q_head = nope + rope
    q = (
        hidden * read("q_lora_rank", None) + read("q_lora_rank", None) * heads * q_head
        if _present(cfg, "q_lora_rank")
        else hidden * heads * q_head
    )
    return q + hidden * (latent + rope) + latent * heads * (nope + v) + heads * v * hidden


def _sparse_layers(cfg: dict[str, Any], read: Read, layers: int) -> list[bool]:
    if _present(cfg, "n_routed_experts") or _present(cfg, "first_k_dense_replace"):
        first = cfg.get("first_k_dense_replace") or 0
        if isinstance(first, bool) or not isinstance(first, int) or not 0 <= first <= layers:
            raise ShapeError(f"'first_k_dense_replace' must be a layer count from 0 to {layers}")
        freq = read("moe_layer_freq", 1)
        return [i >= first and i % freq == 0 for i in range(layers)]
    step = read("decoder_sparse_step", 1)
    dense = cfg.get("mlp_only_layers") or []
    if not isinstance(dense, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in dense
    ):
        raise ShapeError(f"'mlp_only_layers' must list layer numbers from 0 to {layers - 1}")
    return [i not in dense and (i + 1) % step == 0 for i in range(layers)]


def count(
    cfg: dict[str, Any], read: Read, *, layers: int, hidden: int, heads: int, kv: int, head_dim: int,
    vocab: int, tied: bool,
) -> Counted:  # fmt: skip
    """Total and active parameters of ``cfg`` (see the module doc); ``read`` validates integers."""
    matrices = 2 if str(cfg.get("model_type", "llama")) in TWO_MATRIX_MLP else 3
    attn = attention(cfg, read, hidden, heads, kv, head_dim)
    dense_width = read("intermediate_size", 4 * hidden)
    embeddings = vocab * hidden * (1 if tied else 2)
    mla = _present(cfg, "kv_lora_rank")
    kv_latent = read("kv_lora_rank", None) + read("qk_rope_head_dim", None) if mla else 0
    key = next((k for k in EXPERT_KEYS if _present(cfg, k)), None)
    experts = read(key, None) if key else 1
    if experts <= 1:
        total = layers * (attn + matrices * hidden * dense_width) + embeddings
        return Counted(float(total), None, dense_width, kv_latent)
    per_token = read("num_experts_per_tok", None)
    if per_token > experts:
        raise ShapeError(f"'num_experts_per_tok' {per_token} is more than the {experts} experts")
    width = read("moe_intermediate_size", None) if _present(cfg, "moe_intermediate_size") else dense_width
    shared = 0
    if _present(cfg, "shared_expert_intermediate_size"):
        shared = matrices * hidden * read("shared_expert_intermediate_size", None) + hidden  # + its gate
    elif _present(cfg, "n_shared_experts"):
        shared = matrices * hidden * width * read("n_shared_experts", None)
    expert = matrices * hidden * width
    sparse = _sparse_layers(cfg, read, layers)
    n_sparse = sum(sparse)
    n_dense = layers - n_sparse
    router = hidden * experts
    common = layers * attn + n_dense * matrices * hidden * dense_width + n_sparse * (shared + router)
    total = common + n_sparse * experts * expert + embeddings
    active = common + n_sparse * per_token * expert + embeddings
    token_width = per_token * width + (shared // (matrices * hidden))
    return Counted(float(total), float(active), token_width if n_sparse else dense_width, kv_latent)
