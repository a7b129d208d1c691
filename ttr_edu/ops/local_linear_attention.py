"""Local linear attention: the order-1 nonparametric regressor of test-time regression (Wang, Shi, Fox 2025, §4.2).

Softmax attention fits a weighted *constant* around each query (Nadaraya–Watson); local linear attention fits a
weighted *line*. With the causal softmax weights ``w_i = softmax_i(scale · q_t·k_i)`` (``i ≤ t``, ``Σ w_i = 1``):

    k̄ = Σ w_i k_i,   v̄ = Σ w_i v_i,
    Σ_kk = Σ w_i (k_i − k̄)(k_i − k̄)ᵀ + ridge · I,   Σ_vk = Σ w_i (v_i − v̄)(k_i − k̄)ᵀ,
    ŷ_t = v̄ + Σ_vk Σ_kk⁻¹ (q_t − k̄).

This is the weighted least-squares line ``v ≈ a + B (k − k̄)`` minimising ``Σ w_i ‖v_i − a − B (k_i − k̄)‖² +
ridge ‖B‖²`` evaluated at ``q_t``; the ridge (on the slope only) keeps ``Σ_kk`` invertible when fewer tokens than
key dimensions have been seen, e.g. at ``t = 1`` where ``ŷ_1 = v_1``.
"""

from __future__ import annotations

import warnings
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
from ttr_edu._internal.validation import check_positive_float, guarded

from .feature_maps import l2_norm

__all__ = ["local_linear_attention"]


@guarded
def local_linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | None = None,
    ridge: float = 0.01,
    qk_norm: bool = False,
    initial_state: State | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, Any]:
    """Causal local linear attention, closed form ``ŷ_t = v̄ + Σ_vk Σ_kk⁻¹ (q_t − k̄)`` (Wang, Shi, Fox 2025, §4.2).

    The ``Σ_vk Σ_kk⁻¹ (q − k̄)`` term is computed without forming ``Σ_vk``: with ``x = Σ_kk⁻¹ (q − k̄)``,
    ``Σ_vk x = Σ_i w_i v_i (k_i·x) − v̄ (k̄·x)``. Memory ``O(T² + T D_k²)``.

    Args:
        q: queries ``(B, T, H, D_k)``, floating (fp16/bf16/fp32 compute in fp32, fp64 in fp64); the points where
            the local line is evaluated.
        k: keys ``(B, T, H, D_k)``, same dtype as ``q``.
        v: values ``(B, T, H, D_v)``, same dtype as ``q``.
        scale: the inverse temperature (bandwidth) of the softmax weights; default ``D_k ** -0.5``.
        ridge: λ > 0 added to the weighted key covariance (whose weights sum to 1), in units of key variance.
        qk_norm: L2-normalise q and k first (the regression then lives on the unit sphere).
        initial_state: the key-value cache of earlier tokens, ``(k_cache, v_cache)`` of shapes
            ``(B, T_cache, H, D_k)`` and ``(B, T_cache, H, D_v)`` in the dtype of ``q``; the queries are then
            positions ``T_cache .. T_cache + T − 1``.
        output_final_state: also return the cache extended by this call's ``k, v``.

    Returns:
        ``(o, cache)``: ``o`` is ``(B, T, H, D_v)`` in the dtype of ``q``; ``cache`` is ``(k_cache, v_cache)``
        with ``T_cache + T`` tokens, or ``None`` unless ``output_final_state``.

    Raises:
        TypeError: a non-tensor, an integer dtype, mixed dtypes of q, k, v, a non-number ``ridge``.
        ValueError: mismatched shapes (the message names the dims), different devices, ``ridge <= 0``
            (the covariance has to be inverted) or outside the compute dtype's range, a bad ``scale``, non-finite
            inputs; a covariance plus ridge that is not positive definite in floating point (naming ``ridge``).

    Warns:
        RuntimeWarning: ``ridge`` is below the rounding error of the key covariance, so the slope is noise.
    """
    dims = check_inputs(q, k, v)
    scale = resolve_scale(scale, dims["D_k"])
    ridge = check_positive_float("ridge", ridge)
    k, v, T_cache = extend_kv_cache(k, v, initial_state, dims)
    cache = (k, v) if output_final_state else None
    out_dtype, dtype = q.dtype, compute_dtype(q.dtype)
    q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k, v))  # (B, H, T, ·); k, v: (B, H, T_cache + T, ·)
    if qk_norm:
        q, k = l2_norm(q), l2_norm(k)
    D_k = q.shape[3]
    causal = causal_mask(q.shape[2], T_cache, q.device)
    logits = (scale * q @ k.transpose(-1, -2)).masked_fill(~causal, float("-inf"))
    w = torch.softmax(logits, dim=-1)  # (B, H, T, T), rows sum to 1
    # The fit is shift-invariant, so measure keys and queries from the first key: the covariance below is then a
    # difference of small numbers, not of large ones (identical keys give exactly 0 instead of rounding noise that
    # a small ridge would turn into a wrong slope). The first key is causal: every output may depend on it.
    origin = k[:, :, :1]
    q, k = q - origin, k - origin

    k_mean, v_mean = w @ k, w @ v  # (B, H, T, D_k), (B, H, T, D_v)
    kk = (k.unsqueeze(-1) * k.unsqueeze(-2)).flatten(-2)  # (B, H, T, D_k²): k_i k_iᵀ
    second_moment = (w @ kk).unflatten(-1, (D_k, D_k))  # (B, H, T, D_k, D_k): Σ w_i k_i k_iᵀ
    eye = torch.eye(D_k, dtype=dtype, device=q.device)
    cov_kk = second_moment - k_mean.unsqueeze(-1) * k_mean.unsqueeze(-2) + ridge * eye
    L = _factorise(cov_kk, ridge, second_moment)
    x = torch.cholesky_solve((q - k_mean).unsqueeze(-1), L).squeeze(-1)  # Σ_kk⁻¹ (q − k̄)
    slope_term = (w * (x @ k.transpose(-1, -2))) @ v - v_mean * (k_mean * x).sum(-1, keepdim=True)  # Σ_vk x
    o = v_mean + slope_term
    return fla_output(o.transpose(1, 2), out_dtype), cache


def _factorise(cov_kk, ridge, second_moment):
    """Cholesky factor of ``Σ_kk + ridge·I`` (``(B, H, T, D_k, D_k)``), or a ``ValueError`` naming ``ridge``.

    Warns when ``ridge`` is below the rounding error of ``Σ_kk`` (about ``eps · tr Σ w k kᵀ`` for the shifted keys):
    the slope along directions the keys do not span is then set by rounding noise, not by the ridge.
    """
    L, info = torch.linalg.cholesky_ex(cov_kk)
    if (info != 0).any():
        raise ValueError(
            f"ridge: the local key covariance plus ridge is not positive definite in {cov_kk.dtype}; ridge = "
            f"{ridge:.3g} is too small for the scale of the keys: raise it or compute in float64"
        )
    with torch.no_grad():
        noise = torch.finfo(cov_kk.dtype).eps * torch.diagonal(second_moment, dim1=-2, dim2=-1).sum(-1).max()
    if ridge < 10 * noise:
        warnings.warn(
            f"ridge: {ridge:.3g} is below the rounding error of the key covariance in {cov_kk.dtype} (about "
            f"{noise.item():.2g}): the fitted slope is rounding noise; raise ridge or compute in float64",
            RuntimeWarning,
            stacklevel=4,
        )
    return L


# ------------------------------------------------------------------------------------------------------------------
# The naive reference (as fla keeps a naive.py beside each op): the equation of the module docstring, one token at a
# time, in fla's layout and the inputs' dtype, unchecked. Every form above is tested equal to it
# (tests/ops/test_naive.py); read it first.
# ------------------------------------------------------------------------------------------------------------------


def naive(q, k, v, scale=None, ridge=1e-2, qk_norm=False, initial_state=None):
    """``ŷ_t = v̄ + Σ_vk Σ_kk⁻¹ (q_t − k̄)`` with the causal softmax weights ``w_i``, ``k̄ = Σ w_i k_i``,
    ``Σ_kk = Σ w_i (k_i − k̄)(k_i − k̄)ᵀ + ridge · I``, ``Σ_vk = Σ w_i (v_i − v̄)(k_i − k̄)ᵀ``; ``(o, (k, v))``."""
    T, D_k = q.shape[1], q.shape[-1]
    if initial_state is not None:
        k, v = torch.cat([initial_state[0], k], dim=1), torch.cat([initial_state[1], v], dim=1)
    cache = (k, v)
    if qk_norm:
        q, k = torch.nn.functional.normalize(q, dim=-1), torch.nn.functional.normalize(k, dim=-1)
    scale = D_k**-0.5 if scale is None else scale
    before = k.shape[1] - T
    eye = torch.eye(D_k, dtype=q.dtype, device=q.device)
    outputs = []
    for t in range(T):
        seen = before + t + 1
        w = torch.softmax(scale * torch.einsum("bhk,bthk->bht", q[:, t], k[:, :seen]), dim=-1)
        k_mean, v_mean = torch.einsum("bht,bthk->bhk", w, k[:, :seen]), torch.einsum("bht,bthv->bhv", w, v[:, :seen])
        dk, dv = k[:, :seen] - k_mean[:, None], v[:, :seen] - v_mean[:, None]
        cov_kk = torch.einsum("bht,bthi,bthj->bhij", w, dk, dk) + ridge * eye
        cov_vk = torch.einsum("bht,bthv,bthk->bhvk", w, dv, dk)
        x = torch.linalg.solve(cov_kk, (q[:, t] - k_mean)[..., None])[..., 0]
        outputs.append(v_mean + torch.einsum("bhvk,bhk->bhv", cov_vk, x))
    return torch.stack(outputs, dim=1), cache
