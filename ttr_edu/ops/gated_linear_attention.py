"""Gated linear attention with a scalar (per head, per token) log decay ``g``: recurrent and chunkwise forms.

Linear attention that forgets at rate ``α_t = exp(g_t)`` (fla's ``g`` is a log decay, usually ``≤ 0``):

    S_t = exp(g_t) S_{t-1} + k_t v_tᵀ,     o_t = S_tᵀ q_t          (q already scaled by ``scale``)

This is weighted test-time regression with weights ``γ_i^{(t)} = Π_{j=i+1..t} α_j`` (Wang, Shi, Fox 2025, §3.2);
with a scalar decay it is the head-wise gate of RetNet / Mamba-2 style layers (fla's ``simple_gla``).

Correspondence with flash-linear-attention 0.6.0: :func:`gated_linear_attention_chunk` is
``fla.ops.simple_gla.chunk_simple_gla`` (pure-torch: ``naive_chunk_simple_gla``), and
:func:`gated_linear_attention_recurrent` is ``fused_recurrent_simple_gla`` (``naive_recurrent_simple_gla``); same
argument order, ``g`` and state layout. For per-key gates ``(B, T, H, D_k)`` (fla's ``chunk_gla``) see
:mod:`ttr_edu.ops.gla`.
"""

from __future__ import annotations

from typing import Any

import torch

from ttr_edu._internal.contract import (
    STATE,
    State,
    check_inputs,
    check_state,
    compute_dtype,
    fla_output,
    resolve_scale,
    shares_doc,
    zero_state,
)
from ttr_edu._internal.validation import check_chunk_size, guarded

from ._varlen import varlen
from .linear_attention import blockwise

__all__ = ["gated_linear_attention_recurrent", "gated_linear_attention_chunk"]

_SHARED_DOC = """
    Args:
        q: queries ``(B, T, H, D_k)``, floating (fp16/bf16/fp32 compute in fp32, fp64 in fp64).
        k: keys ``(B, T, H, D_k)``, same dtype as ``q``.
        v: values ``(B, T, H, D_v)``, same dtype as ``q``.
        g: log decay ``(B, T, H)`` in ``[−inf, 0]``, any floating dtype; ``exp(g_t)`` multiplies the state before
            step t. ``g_t = −inf`` is a full reset (``S`` is forgotten before token t), exact in both forms.
        scale: multiplies ``q``; default ``D_k ** -0.5`` (fla).
        initial_state: ``S_0`` ``(B, H, D_k, D_v)``; ``None`` means zero.
        output_final_state: also return ``S_T`` (fp32, or fp64 for fp64 inputs).
        chunk_size: (``gated_linear_attention_chunk`` only) tokens per chunk, any positive int; T need not be a
            multiple.
        cu_seqlens: (recurrent and chunk forms) fla's variable-length offsets, an integer tensor ``(N + 1,)``: the N
            sequences are packed along T in a batch of one (``B = 1``), sequence n is tokens
            ``cu_seqlens[n]:cu_seqlens[n+1]``, and the initial and final states are ``(N, H, D_k, D_v)``, one per
            sequence; no state crosses a boundary. ``None``: one sequence per batch row.

    Returns:
        ``(o, S_T)`` (``S_T`` is ``None`` unless ``output_final_state``); ``o`` is ``(B, T, H, D_v)`` in the dtype
        of ``q``.

    Raises:
        TypeError: a non-tensor, an integer dtype, mixed dtypes of q, k, v.
        ValueError: a ``g`` that is NaN, ``+inf`` or ``> 0``; mismatched shapes (the message names the dims),
            different devices, a bad ``scale`` or
            ``chunk_size``.
"""


def _prepare(q, k, v, g, scale, initial_state):
    dims = check_inputs(q, k, v, g=g)
    scale = resolve_scale(scale, dims["D_k"])
    dtype = compute_dtype(q.dtype)
    if initial_state is not None:
        check_state("initial_state", initial_state, dims, STATE, q.device)
    S = zero_state(dims, dtype, q.device) if initial_state is None else initial_state.to(dtype)
    q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k, v))  # (B, H, T, ·), q not yet scaled
    return q, k, v, g.to(dtype).transpose(1, 2), S, scale


@guarded
@shares_doc(_SHARED_DOC)
@varlen("q", "k", "v", "g")
def gated_linear_attention_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Any]:
    """Recurrent form: ``S_t = exp(g_t) S_{t-1} + k_t v_tᵀ``, ``o_t = S_tᵀ q_t``, one token at a time.

    Source: Wang, Shi, Fox 2025, §3.2 (decay weights); fla ``naive_recurrent_simple_gla``'s convention.
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    q, k, v, g, S, scale = _prepare(q, k, v, g, scale, initial_state)
    q = q * scale
    outputs = []
    for t in range(q.shape[2]):
        decay = torch.exp(g[:, :, t, None, None])
        S = decay * S + torch.einsum("b h k, b h v -> b h k v", k[:, :, t], v[:, :, t])
        outputs.append(torch.einsum("b h k v, b h k -> b h v", S, q[:, :, t]))
    o = fla_output(torch.stack(outputs, dim=1), out_dtype)
    return o, (S if output_final_state else None)


@guarded
@shares_doc(_SHARED_DOC)
@varlen("q", "k", "v", "g")
def gated_linear_attention_chunk(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
    chunk_size: int = 64,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Any]:
    """Chunkwise form: decayed T×T attention inside chunks, the decayed state between chunks.

    With the in-chunk cumulative log decay ``G_i = Σ_{j≤i} g_j`` and ``Γ_ij = exp(G_i − G_j)`` (i ≥ j):

        O_n = diag(exp(G)) Q_n S_n + (Q_n K_nᵀ ⊙ Γ ⊙ M) V_n
        S_{n+1} = exp(G_C) S_n + (diag(exp(G_C − G)) K_n)ᵀ V_n

    (Yang et al. 2024, "Gated linear attention", chunkwise form, with a scalar gate). Memory ``O(T C)``, nothing of
    size T×T; any positive ``chunk_size``, any T (the last chunk is zero-padded: ``g = 0`` keeps the state).
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    chunk_size = check_chunk_size(chunk_size, q)  # capped at T
    q, k, v, g, S, scale = _prepare(q, k, v, g, scale, initial_state)
    o, S = blockwise(q, k, v, S, chunk_size, scale, g=g)  # the block form shared with linear attention
    return fla_output(o, out_dtype), (S if output_final_state else None)


# ------------------------------------------------------------------------------------------------------------------
# The naive reference (as fla keeps a naive.py beside each op): the equation of the module docstring, one token at a
# time, in fla's layout and the inputs' dtype, unchecked. Every form above is tested equal to it
# (tests/ops/test_naive.py); read it first.
# ------------------------------------------------------------------------------------------------------------------


def naive(q, k, v, g, scale=None, initial_state=None):
    """``S_t = exp(g_t) S_{t−1} + k_t v_tᵀ``, ``o_t = S_tᵀ q_t``: ``(B, T, H, ·)`` and ``g`` ``(B, T, H)`` in,
    ``(o, S_T)`` out."""
    B, T, H, D_k = q.shape
    S = q.new_zeros(B, H, D_k, v.shape[-1]) if initial_state is None else initial_state
    q = q * (D_k**-0.5 if scale is None else scale)
    outputs = []
    for t in range(T):
        S = g[:, t, :, None, None].exp() * S + k[:, t, :, :, None] * v[:, t, :, None, :]
        outputs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
    return torch.stack(outputs, dim=1), S
