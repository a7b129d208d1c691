"""The local (nonparametric) classes: refitted at every query from all the stored pairs.

Tensors are heads-first as in :mod:`ttr_edu.regression.linear`; each returns ``o`` ``(B, H, T, D_v)``.
"""

from __future__ import annotations

import math

import torch

from .function_classes import KernelRidge, LocalConstant, LocalLinear
from .linear import _raise_if_not_factorised
from .weights import regression_weights

__all__ = ["LOCAL_SOLVERS"]


def _log_kernel_weights(q, k, g, scale, kernel):
    """``log(γ_i^{(t)} κ(q_t, k_i))`` for ``i ≤ t``, ``−inf`` above the diagonal: ``(B, H, T, T)``."""
    T = q.shape[2]
    logits = scale * (q @ k.transpose(-1, -2))  # exp(scale q·k): the softmax kernel
    if kernel == "gaussian":  # −scale ‖q − k‖²/2 = scale q·k − scale ‖q‖²/2 − scale ‖k‖²/2
        logits = logits - 0.5 * scale * (q.pow(2).sum(-1)[..., :, None] + k.pow(2).sum(-1)[..., None, :])
    if g is None:
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        return logits.masked_fill(~causal, -math.inf)
    return logits + regression_weights(g.transpose(1, 2)).to(q).log()  # log 0 = −inf above the diagonal


def _local_constant(q, k, v, g, scale, kernel):
    """Nadaraya–Watson: ``y_t = Σ_i w_ti v_i`` with ``w_t = softmax_i(log γ_i^{(t)} κ(q_t, k_i))``."""
    return torch.softmax(_log_kernel_weights(q, k, g, scale, kernel), dim=-1) @ v


def _local_linear(q, k, v, g, scale, ridge, kernel):
    """``ŷ_t = v̄_t + Σ_vk,t (Σ_kk,t + λI)⁻¹ (q_t − k̄_t)`` with softmax weights ``w_t`` (Wang et al. 2025 §4.2).

    ``Σ_vk x = Σ_i w_i v_i (k_i·x) − v̄ (k̄·x)``, so the ``D_v × D_k`` cross-covariance is never formed. The ridge
    keeps ``Σ_kk + λI`` positive definite when fewer than ``D_k`` keys carry weight (early steps, peaked weights).
    """
    D_k = q.shape[-1]
    w = torch.softmax(_log_kernel_weights(q, k, g, scale, kernel), dim=-1)  # (B, H, T, T)
    k_mean, v_mean = w @ k, w @ v  # (B, H, T, D)
    second = (w @ (k[..., :, None] * k[..., None, :]).flatten(-2)).unflatten(-1, (D_k, D_k))  # Σ_i w_ti k_i k_iᵀ
    cov = second - k_mean[..., :, None] * k_mean[..., None, :]
    eye = torch.eye(D_k, dtype=q.dtype, device=q.device)
    L, info = torch.linalg.cholesky_ex(cov + ridge * eye)
    _raise_if_not_factorised(info, "the local key covariance plus ridge")
    x = torch.cholesky_solve((q - k_mean)[..., None], L)[..., 0]  # (Σ_kk + λI)⁻¹ (q − k̄)
    slope_term = (w * (x @ k.transpose(-1, -2))) @ v - v_mean * (k_mean * x).sum(-1, keepdim=True)
    return v_mean + slope_term


def _kernel_ridge(q, k, v, g, scale, ridge, kernel):
    """``y_t = κ(q_t, K_t) α_t`` with ``(Γ_t κ(K_t, K_t) + λI) α_t = Γ_t V_t`` over the pairs ``i ≤ t``.

    The weighted normal equations of kernel ridge regression (``Γ_t = diag(γ_i^{(t)})``), one ``t × t`` solve per
    step; a zero weight (a reset) drops the pair's row, the solve stays well posed since ``λ > 0``.
    """
    T = q.shape[2]

    def gram(x, y):
        logits = scale * (x @ y.mT)
        if kernel == "gaussian":
            logits = logits - 0.5 * scale * (x.pow(2).sum(-1)[..., :, None] + y.pow(2).sum(-1)[..., None, :])
        return logits.exp()

    K_kk, K_qk = gram(k, k), gram(q, k)  # (B, H, T, T)
    gamma = None if g is None else regression_weights(g.transpose(1, 2)).to(q)  # (B, H, T, T): γ_i^{(t)} in row t
    outputs = []
    for t in range(T):
        K_t = K_kk[:, :, : t + 1, : t + 1]
        V_t = v[:, :, : t + 1]
        w = None if gamma is None else gamma[:, :, t, : t + 1, None]  # (B, H, t+1, 1)
        system = K_t if w is None else w * K_t
        system = system + ridge * torch.eye(t + 1, dtype=q.dtype, device=q.device)
        coef = torch.linalg.solve(system, V_t if w is None else w * V_t)  # (B, H, t+1, D_v)
        outputs.append(K_qk[:, :, t, None, : t + 1] @ coef)
    return torch.cat(outputs, dim=2)


#: local class -> how it answers every query: ``solve(function_class, optimizer, q, k, v, g, scale)`` on heads-first
#: tensors (``q`` unscaled: ``scale`` is the kernel's); the optimiser is :class:`~ttr_edu.regression.ExactSolve`,
#: whose ridge the linear fits take.
LOCAL_SOLVERS = {
    LocalConstant: lambda fc, opt, q, k, v, g, scale: _local_constant(q, k, v, g, scale, fc.kernel),
    LocalLinear: lambda fc, opt, q, k, v, g, scale: _local_linear(q, k, v, g, scale, opt.ridge, fc.kernel),
    KernelRidge: lambda fc, opt, q, k, v, g, scale: _kernel_ridge(q, k, v, g, scale, opt.ridge, fc.kernel),
}
