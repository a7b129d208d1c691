"""Causal softmax attention, the order-0 nonparametric regressor of test-time regression.

    o_t = Σ_{i≤t} softmax_i(scale · q_t · k_i) v_i

It is the Nadaraya–Watson estimator with kernel ``exp(scale · q·k)``; that is a proper Gaussian-kernel smoother
``exp(−scale ‖q − k‖² / 2)`` only when the key norms are constant, which is the argument for QK-norm, and the
temperature ``1 / scale`` plays the bandwidth (Wang, Shi, Fox 2025, §4).
"""

from __future__ import annotations

import torch

from ._common import check_inputs, compute_dtype, resolve_scale
from .feature_maps import l2_norm

__all__ = ["softmax_attention"]


def softmax_attention(q, k, v, scale=None, qk_norm=False):
    """Causal softmax attention (Vaswani et al. 2017, eq. 1, with a causal mask).

    Args:
        q: queries ``(B, T, H, D_k)``, floating (fp16/bf16/fp32 compute in fp32, fp64 in fp64).
        k: keys ``(B, T, H, D_k)``, same dtype as ``q``.
        v: values ``(B, T, H, D_v)``, same dtype as ``q``.
        scale: the inverse temperature multiplying ``q·k``; default ``D_k ** -0.5``.
        qk_norm: L2-normalise q and k first, so the kernel depends on ``‖q − k‖`` only (then pass a larger
            ``scale``, e.g. 10–30: the default makes the weights almost uniform).

    Returns:
        ``(o, None)``: ``o`` is ``(B, T, H, D_v)`` in the dtype of ``q``; there is no state (the same return
        contract as every other op).

    Raises:
        TypeError: a non-tensor, an integer dtype, mixed dtypes of q, k, v.
        ValueError: mismatched shapes (the message names the dims), different devices, a bad ``scale``.
    """
    dims = check_inputs(q, k, v)
    scale = resolve_scale(scale, dims["D_k"])
    out_dtype, dtype = q.dtype, compute_dtype(q.dtype)
    q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k, v))  # (B, H, T, ·)
    if qk_norm:
        q, k = l2_norm(q), l2_norm(k)
    T = q.shape[2]
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    logits = (scale * q @ k.transpose(-1, -2)).masked_fill(~causal, float("-inf"))  # (B, H, T, T)
    o = torch.softmax(logits, dim=-1) @ v
    return o.transpose(1, 2).to(out_dtype), None
