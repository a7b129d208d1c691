"""The gated delta rule: the delta rule with a scalar log decay ``g``, recurrent and chunkwise forms.

fla's convention (Yang, Kautz, Hatamizadeh 2025, "Gated Delta Networks"): the decay is applied to the state
*before* the error is computed, so the error is measured against the decayed memory:

    S̃_t = exp(g_t) S_{t-1}
    S_t = S̃_t + β_t k_t (v_t − S̃_tᵀ k_t)ᵀ  =  exp(g_t) (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ
    o_t = S_tᵀ q_t                                    (q already scaled by ``scale``)

In test-time-regression terms (Wang, Shi, Fox 2025): one SGD step with learning rate β_t on the newest pair,
after weight decay by ``exp(g_t)``. Stability is as for the delta rule (``β ‖k‖² ∈ [0, 2]``, and ``g ≤ 0``).

Correspondence with flash-linear-attention 0.6.0: :func:`gated_delta_rule_chunk` is
``fla.ops.gated_delta_rule.chunk_gated_delta_rule`` (pure-torch: ``naive_chunk_gated_delta_rule``),
:func:`gated_delta_rule_recurrent` is ``fused_recurrent_gated_delta_rule`` (``naive_recurrent_gated_delta_rule``);
same argument order ``(q, k, v, g, beta)`` and state layout.
"""

from __future__ import annotations

from typing import Any

import torch

from ttr_edu._internal.contract import State, fla_output, require_tensor, shares_doc
from ttr_edu._internal.validation import check_chunk_size, guarded

from ._varlen import varlen
from .delta_rule import chunk_forward, prepare, recurrent_forward

__all__ = ["gated_delta_rule_recurrent", "gated_delta_rule_chunk"]

_SHARED_DOC = """
    Args:
        q: queries ``(B, T, H, D_k)``, floating (fp16/bf16/fp32 compute in fp32, fp64 in fp64).
        k: keys ``(B, T, H, D_k)``, same dtype as ``q`` (usually L2-normalised).
        v: values ``(B, T, H, D_v)``, same dtype as ``q``.
        g: log decay ``(B, T, H)`` in ``[−inf, 0]``, any floating dtype; ``exp(g_t)`` multiplies the state before
            the error. ``g_t = −inf`` is a full reset (``S`` is forgotten before token t), exact in both forms.
        beta: learning rate β ``(B, T, H)``, any floating dtype.
        scale: multiplies ``q``; default ``D_k ** -0.5`` (fla).
        initial_state: ``S_0`` ``(B, H, D_k, D_v)``; ``None`` means zero.
        output_final_state: also return ``S_T`` (fp32, or fp64 for fp64 inputs).
        chunk_size: (``gated_delta_rule_chunk`` only) tokens per chunk, any positive int; T need not be a multiple.
        check_stability: ``"warn"`` (default), ``"raise"`` or ``"ignore"`` when ``β ‖k‖²`` leaves ``[0, 2]``.
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
            different devices, a bad ``scale``,
            ``chunk_size`` or ``check_stability``; with ``check_stability="raise"``, ``β ‖k‖² ∉ [0, 2]``.
"""


@guarded
@shares_doc(_SHARED_DOC)
@varlen("q", "k", "v", "g", "beta")
def gated_delta_rule_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
    check_stability: str = "warn",
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Any]:
    """Recurrent form: decay, then the delta-rule correction against the decayed state; one token at a time.

    Source: Yang, Kautz, Hatamizadeh 2025, eq. 10; fla ``naive_recurrent_gated_delta_rule``'s order of operations.
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    q, k, v, beta, g, S, scale = prepare(q, k, v, beta, scale, initial_state, check_stability, g=require_tensor("g", g))
    o, S = recurrent_forward(q, k, v, beta, S, scale, g=g)  # decay first (fla), then the delta-rule correction
    return fla_output(o, out_dtype), (S if output_final_state else None)


@guarded
@shares_doc(_SHARED_DOC)
@varlen("q", "k", "v", "g", "beta")
def gated_delta_rule_chunk(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
    chunk_size: int = 64,
    check_stability: str = "warn",
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Any]:
    """Chunkwise form: the WY/UT transform with in-chunk decays (see :func:`ttr_edu.ops.delta_rule.chunk_forward`).

    With ``G_i = Σ_{j≤i} g_j`` inside a chunk, ``γ = exp(G)``, ``Γ_ij = exp(G_i − G_j)``:
    ``(I + tril(diag(β)(Γ ⊙ K Kᵀ), −1)) [W, U] = diag(β) [diag(γ) K, V]``, ``u = U − W S``,
    ``O = diag(γ) Q S + (Q Kᵀ ⊙ Γ ⊙ M) u``, ``S ← γ_C S + (diag(γ_C / γ) K)ᵀ u``. Memory ``O(T C)``, nothing of
    size T×T; any positive ``chunk_size``, any T.
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    chunk_size = check_chunk_size(chunk_size, q)  # capped at T
    q, k, v, beta, g, S, scale = prepare(q, k, v, beta, scale, initial_state, check_stability, g=require_tensor("g", g))
    o, S = chunk_forward(q, k, v, beta, S, chunk_size, scale=scale, g=g)
    return fla_output(o, out_dtype), (S if output_final_state else None)


# ------------------------------------------------------------------------------------------------------------------
# The naive reference (as fla keeps a naive.py beside each op): the equation of the module docstring, one token at a
# time, in fla's layout and the inputs' dtype, unchecked. Every form above is tested equal to it
# (tests/ops/test_naive.py); read it first.
# ------------------------------------------------------------------------------------------------------------------


def naive(q, k, v, g, beta, scale=None, initial_state=None):
    """``S̃_t = exp(g_t) S_{t−1}``, ``S_t = S̃_t + β_t k_t (v_t − S̃_tᵀ k_t)ᵀ``, ``o_t = S_tᵀ q_t``: the decay first,
    as fla; ``(o, S_T)`` out."""
    B, T, H, D_k = q.shape
    S = q.new_zeros(B, H, D_k, v.shape[-1]) if initial_state is None else initial_state
    q = q * (D_k**-0.5 if scale is None else scale)
    outputs = []
    for t in range(T):
        S = g[:, t, :, None, None].exp() * S
        error = v[:, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, t])
        S = S + beta[:, t, :, None, None] * k[:, t, :, :, None] * error[:, :, None, :]
        outputs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
    return torch.stack(outputs, dim=1), S
