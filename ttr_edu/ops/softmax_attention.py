"""Causal softmax attention, the order-0 nonparametric regressor of test-time regression.

    o_t = Σ_{i≤t} softmax_i(scale · q_t · k_i) v_i

It is the Nadaraya–Watson estimator with kernel ``exp(scale · q·k)``; that is a proper Gaussian-kernel smoother
``exp(−scale ‖q − k‖² / 2)`` only when the key norms are constant, which is the argument for QK-norm, and the
temperature ``1 / scale`` plays the bandwidth (Wang, Shi, Fox 2025, §4).
"""

from __future__ import annotations

from typing import Any

import torch

from ttr_edu._internal.contract import (
    State,
    causal_mask,
    check_inputs,
    compute_dtype,
    extend_kv_cache,
    fla_output,
    resolve_scale,
)
from ttr_edu._internal.validation import guarded

from .feature_maps import l2_norm

__all__ = ["softmax_attention"]


@guarded
def softmax_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | None = None,
    qk_norm: bool = False,
    initial_state: State | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, Any]:
    """Causal softmax attention (Vaswani et al. 2017, eq. 1, with a causal mask).

    Args:
        q: queries ``(B, T, H, D_k)``, floating (fp16/bf16/fp32 compute in fp32, fp64 in fp64).
        k: keys ``(B, T, H, D_k)``, same dtype as ``q``.
        v: values ``(B, T, H, D_v)``, same dtype as ``q``.
        scale: the inverse temperature multiplying ``q·k``; default ``D_k ** -0.5``.
        qk_norm: L2-normalise q and k first, so the kernel depends on ``‖q − k‖`` only (then pass a larger
            ``scale``, e.g. 10–30: the default makes the weights almost uniform).
        initial_state: the key-value cache of earlier tokens, ``(k_cache, v_cache)`` of shapes
            ``(B, T_cache, H, D_k)`` and ``(B, T_cache, H, D_v)`` in the dtype of ``q``: the memory of a
            nonparametric layer, which grows with every token. The queries are then positions ``T_cache ..
            T_cache + T − 1`` and see the whole cache.
        output_final_state: also return the cache extended by this call's ``k, v``.

    Returns:
        ``(o, cache)``: ``o`` is ``(B, T, H, D_v)`` in the dtype of ``q``; ``cache`` is ``(k_cache, v_cache)``
        with ``T_cache + T`` tokens, or ``None`` unless ``output_final_state``.

    Raises:
        TypeError: a non-tensor, an integer dtype, mixed dtypes of q, k, v, a cache of another dtype.
        ValueError: mismatched shapes (the message names the dims), different devices, a bad ``scale``.
    """
    dims = check_inputs(q, k, v)
    scale = resolve_scale(scale, dims["D_k"])
    k, v, T_cache = extend_kv_cache(k, v, initial_state, dims)
    cache = (k, v) if output_final_state else None
    out_dtype, dtype = q.dtype, compute_dtype(q.dtype)
    q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k, v))  # (B, H, T, ·); k, v: (B, H, T_cache + T, ·)
    if qk_norm:
        q, k = l2_norm(q), l2_norm(k)
    causal = causal_mask(q.shape[2], T_cache, q.device)
    logits = (scale * q @ k.transpose(-1, -2)).masked_fill(~causal, float("-inf"))  # (B, H, T, T_cache + T)
    o = torch.softmax(logits, dim=-1) @ v
    return fla_output(o.transpose(1, 2), out_dtype), cache


def attend_last(q, k, v, scale):
    """Softmax attention of each sequence's newest query over all its keys, unchecked: ``q`` ``(B, 1, H, D_k)``,
    ``k`` ``(B, t, H, D_k)``, ``v`` ``(B, t, H, D_v)`` (the key-value cache with this token last) -> ``(B, 1, H, D_v)``.
    The newest position sees every key, so there is no mask to build. For a layer's one-token step
    (:meth:`ttr_edu.layers.SoftmaxAttention.mix_step_unchecked`), whose caller checked its arguments once."""
    logits = torch.einsum("bqhd,bthd->bhqt", q * scale, k)
    return torch.einsum("bhqt,bthd->bqhd", torch.softmax(logits, dim=-1), v)


# ------------------------------------------------------------------------------------------------------------------
# The naive reference (as fla keeps a naive.py beside each op): the equation of the module docstring, one token at a
# time, in fla's layout and the inputs' dtype, unchecked. Every form above is tested equal to it
# (tests/ops/test_naive.py); read it first.
# ------------------------------------------------------------------------------------------------------------------


def naive(q, k, v, scale=None, qk_norm=False, initial_state=None):
    """``o_t = Σ_{i≤t} softmax_i(scale · q_t·k_i) v_i`` over the cache and this call's tokens; ``(o, (k, v))``."""
    T, D_k = q.shape[1], q.shape[-1]
    if initial_state is not None:
        k, v = torch.cat([initial_state[0], k], dim=1), torch.cat([initial_state[1], v], dim=1)
    cache = (k, v)
    if qk_norm:
        q, k = torch.nn.functional.normalize(q, dim=-1), torch.nn.functional.normalize(k, dim=-1)
    scale = D_k**-0.5 if scale is None else scale
    before = k.shape[1] - T
    outputs = []
    for t in range(T):
        seen = before + t + 1
        w = torch.softmax(scale * torch.einsum("bhk,bthk->bht", q[:, t], k[:, :seen]), dim=-1)
        outputs.append(torch.einsum("bht,bthv->bhv", w, v[:, :seen]))
    return torch.stack(outputs, dim=1), cache
