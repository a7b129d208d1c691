"""DeltaProduct: ``n_h`` delta-rule (Householder) steps per token, each with its own key, value and β.

Siems, Carstensen, Zela, Hutter, Pontil, Grazzi 2025 ("DeltaProduct: Improving State-Tracking in Linear RNNs via
Householder Products"), in fla's layout for ``gated_delta_product``: token ``t`` brings ``n_h`` keys, values and
steps, stored interleaved, ``k[:, t·n_h + j]`` for ``j = 0..n_h−1``. With an optional log decay ``g_t`` applied once
per token, before its steps:

    S ← exp(g_t) S;   for j = 0..n_h−1:  S ← S + β_{t,j} k_{t,j} (v_{t,j} − Sᵀ k_{t,j})ᵀ;   o_t = Sᵀ q_t

so the state transition of a token is the product ``exp(g_t) Π_j (I − β_{t,j} k_{t,j} k_{t,j}ᵀ)`` of ``n_h``
generalised Householder matrices. In test-time-regression terms: several SGD steps per token. ``n_h = 1`` is the
(gated) delta rule.

The chunk form is the delta rule's WY/UT chunk form on the ``T·n_h`` sub-steps, with the query placed at each
token's last sub-step (zero queries elsewhere, whose outputs are dropped) and ``g_t`` at its first.
"""

from __future__ import annotations

from typing import Any

import torch

from ttr_edu._internal.contract import (
    STATE,
    State,
    check_log_decay,
    check_nonempty,
    check_state,
    compute_dtype,
    fla_output,
    resolve_scale,
    shares_doc,
    zero_state,
)
from ttr_edu._internal.contract import check_stability as _check_stability
from ttr_edu._internal.validation import Dims, check_positive_int, check_same_device, guarded

from .delta_rule import chunk_forward

__all__ = ["delta_product_recurrent", "delta_product_chunk"]

_SHARED_DOC = """
    Args:
        q: queries ``(B, T, H, D_k)``, floating (fp16/bf16/fp32 compute in fp32, fp64 in fp64).
        k: keys ``(B, T·n_h, H, D_k)``, token t's j-th key at ``t·n_h + j``; same dtype as ``q``.
        v: values ``(B, T·n_h, H, D_v)``, interleaved as ``k``.
        beta: steps ``(B, T·n_h, H)``, interleaved as ``k``, any floating dtype.
        num_householder: ``n_h``, steps per token (a positive int).
        g: optional log decay ``(B, T, H)`` in ``[−inf, 0]``, applied once per token before its steps.
        scale: multiplies ``q``; default ``D_k ** -0.5`` (fla).
        initial_state: ``S_0`` ``(B, H, D_k, D_v)``; ``None`` means zero.
        output_final_state: also return ``S_T`` (fp32, or fp64 for fp64 inputs).
        chunk_size: (``delta_product_chunk`` only) sub-steps per chunk, any positive int.
        check_stability: ``"warn"`` (default), ``"raise"`` or ``"ignore"`` when ``β ‖k‖²`` leaves ``[0, 2]``.

    Returns:
        ``(o, S_T)`` (``S_T`` is ``None`` unless ``output_final_state``); ``o`` is ``(B, T, H, D_v)`` in the dtype
        of ``q``.

    Raises:
        TypeError: a non-tensor, an integer dtype, mixed dtypes of q, k, v, a non-int ``num_householder``.
        ValueError: mismatched shapes (the message names the dims, ``k`` must have ``T·n_h`` rows), T = 0,
            different devices, a bad ``g``, ``scale``, ``chunk_size`` or ``check_stability``.
"""


def _prepare(q, k, v, beta, num_householder, g, scale, initial_state, check_stability):
    n = check_positive_int("num_householder", num_householder)
    dims = Dims()
    dims.bind("q", q, ("B", "T", "H", "D_k"))
    if dims["T"] == 0:
        raise ValueError(f"q: expected at least one token, got shape {tuple(q.shape)} with T = 0")
    dims.sizes["T·n_h"], dims.owner["T·n_h"] = dims["T"] * n, "q and num_householder"
    dims.bind("k", k, ("B", "T·n_h", "H", "D_k"))
    dims.bind("v", v, ("B", "T·n_h", "H", "D_v"))
    dims.bind("beta", beta, ("B", "T·n_h", "H"))
    if g is not None:
        dims.bind("g", g, ("B", "T", "H"))
        check_log_decay(g)
    check_nonempty(dims, q=("B", "H", "D_k"), v=("D_v",))
    check_same_device(q=q, k=k, v=v, beta=beta, g=g)
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype:
            raise TypeError(f"{name}: expected the dtype of q ({q.dtype}), got {x.dtype}")
    _check_stability(beta, k, check_stability)
    scale = resolve_scale(scale, dims["D_k"])
    dtype = compute_dtype(q.dtype)
    if initial_state is not None:
        check_state("initial_state", initial_state, dims, STATE, q.device)
    S = zero_state(dims, dtype, q.device) if initial_state is None else initial_state.to(dtype)
    q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k, v))  # (B, H, ·, D)
    beta = beta.to(dtype).transpose(1, 2)
    g = None if g is None else g.to(dtype).transpose(1, 2)
    return q * scale, k, v, beta, g, S, n


@guarded
@shares_doc(_SHARED_DOC)
def delta_product_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    num_householder: int,
    g: torch.Tensor | None = None,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
    check_stability: str = "warn",
) -> tuple[torch.Tensor, Any]:
    """Recurrent form: per token, decay once, then ``n_h`` delta-rule steps; read after the last one.

    Source: Siems et al. 2025, eq. 4 (the product of ``n_h`` Householder steps per token).
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    q, k, v, beta, g, S, n = _prepare(q, k, v, beta, num_householder, g, scale, initial_state, check_stability)
    outputs = []
    for t in range(q.shape[2]):
        if g is not None:
            S = torch.exp(g[:, :, t, None, None]) * S
        for j in range(t * n, t * n + n):
            k_j = k[:, :, j]
            error = v[:, :, j] - torch.einsum("b h k v, b h k -> b h v", S, k_j)
            S = S + torch.einsum("b h k, b h v -> b h k v", k_j, beta[:, :, j, None] * error)
        outputs.append(torch.einsum("b h k v, b h k -> b h v", S, q[:, :, t]))
    o = fla_output(torch.stack(outputs, dim=1), out_dtype)
    return o, (S if output_final_state else None)


@guarded
@shares_doc(_SHARED_DOC)
def delta_product_chunk(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    num_householder: int,
    g: torch.Tensor | None = None,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
    chunk_size: int = 64,
    check_stability: str = "warn",
) -> tuple[torch.Tensor, Any]:
    """Chunk form: the (gated) delta rule's WY/UT chunks over the ``T·n_h`` sub-steps, read at every ``n_h``-th."""
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    check_positive_int("chunk_size", chunk_size)
    q, k, v, beta, g, S, n = _prepare(q, k, v, beta, num_householder, g, scale, initial_state, check_stability)
    B, H, T, D_k = q.shape
    q_sub = q.new_zeros(B, H, T, n, D_k)
    q_sub[:, :, :, -1] = q  # the query of token t at its last sub-step
    g_sub = None
    if g is not None:
        g_sub = g.new_zeros(B, H, T, n)
        g_sub[..., 0] = g  # the decay of token t at its first sub-step
        g_sub = g_sub.flatten(2)
    o, S = chunk_forward(q_sub.flatten(2, 3), k, v, beta, S, chunk_size, g=g_sub)  # o: (B, T·n, H, D_v)
    o = o[:, n - 1 :: n]
    return fla_output(o, out_dtype), (S if output_final_state else None)


# ------------------------------------------------------------------------------------------------------------------
# The naive reference (as fla keeps a naive.py beside each op): the equation of the module docstring, one token at a
# time, in fla's layout and the inputs' dtype, unchecked. Every form above is tested equal to it
# (tests/ops/test_naive.py); read it first.
# ------------------------------------------------------------------------------------------------------------------


def naive(q, k, v, beta, num_householder, g=None, scale=None, initial_state=None):
    """Per token ``t``: ``S ← exp(g_t) S``, then for ``j < n_h`` the delta-rule step with ``k, v, β`` of row
    ``t·n_h + j``; ``o_t = Sᵀ q_t`` after the last: ``q`` ``(B, T, H, D_k)``, ``k, v, beta`` ``T·n_h`` rows;
    ``(o, S_T)`` out."""
    B, T, H, D_k = q.shape
    S = q.new_zeros(B, H, D_k, v.shape[-1]) if initial_state is None else initial_state
    q = q * (D_k**-0.5 if scale is None else scale)
    outputs = []
    for t in range(T):
        if g is not None:
            S = g[:, t, :, None, None].exp() * S
        for row in range(t * num_householder, (t + 1) * num_householder):
            error = v[:, row] - torch.einsum("bhkv,bhk->bhv", S, k[:, row])
            S = S + beta[:, row, :, None, None] * k[:, row, :, :, None] * error[:, :, None, :]
        outputs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
    return torch.stack(outputs, dim=1), S
