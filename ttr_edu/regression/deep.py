"""Gradient methods for any function class, gradients by autodiff: mini-batch GD (TTT) and momentum (Titans).

The memory is a tuple of parameters per (batch, head): ``(S,)`` for :class:`Linear`, ``(W1, W2)`` for :class:`MLP`.
The loss of one pair is the objective's ``½ ‖v − f(k)‖²``; autograd differentiates it, for every pair at once (each
pair gets its own copy of the parameters, see :func:`per_pair_gradients`). Nothing here writes a gradient by hand
(the ops of :mod:`ttr_edu.ops.ttt` and :mod:`ttr_edu.ops.titans` do; the tests prove the two agree). Tensors are heads-first, ``q`` already scaled.
"""

from __future__ import annotations

import torch

from .function_classes import MLP, Linear
from .optimizers import MomentumSGD, OnlineSGD


def forward(function_class, params, x):
    """``f(x)`` for parameters with any leading batch dims ``(..., D_in, D_out)`` and inputs ``x`` ``(..., D_k)``."""
    x_row = x.unsqueeze(-2)  # (..., 1, D_k)
    if isinstance(function_class, Linear):
        z = x_row @ params[0]
    else:
        z = torch.nn.functional.gelu(x_row @ params[0]) @ params[1]
        if function_class.layer_norm:
            z = torch.nn.functional.layer_norm(z, z.shape[-1:], eps=1e-6)
        if function_class.residual:
            z = x_row + z
    return z.squeeze(-2)


def pair_loss(function_class, params, k, v):
    """``½ ‖v − f(k)‖²``, the objective's term for each pair: shape ``k.shape[:-1]``."""
    return 0.5 * (forward(function_class, params, k) - v).pow(2).sum(-1)


def per_pair_gradients(function_class, params, k, v):
    """``∇ℓ(P_i; k_i, v_i)`` for each pair ``i``, each at its own copy ``P_i`` of the parameters (autodiff).

    The losses of different copies share no parameter, so the gradient of their sum holds each pair's own gradient.
    The graph is kept when autograd is on, so that the outer model can differentiate through the inner steps.
    """
    outer = torch.is_grad_enabled()
    with torch.enable_grad():
        # fresh leaves unless the outer graph is wanted (a tensor made under no_grad may carry no usable graph)
        leaves = [p if outer and p.requires_grad else p.detach().requires_grad_() for p in params]
        total = pair_loss(function_class, leaves, k, v).sum()
        return torch.autograd.grad(total, leaves, create_graph=outer)


def _per_token(x, like):
    """``(B, H, N)`` -> broadcastable against ``like`` ``(B, H, N, *shape)``."""
    return x.reshape(*x.shape, *[1] * (like.dim() - x.dim()))


def mini_batch_gd(opt, function_class, params, q, k, v, beta):
    """``W_t = W_s − Σ_{s<i≤t} β_i ∇ℓ(W_s; k_i, v_i)``, ``o_t = f_{W_t}(q_t)``; mini-batches of ``opt.batch_size``.

    :class:`OnlineSGD` is the case ``batch_size = 1``. Returns ``o`` ``(B, H, T, D_v)`` and the final parameters.
    """
    size = 1 if isinstance(opt, OnlineSGD) else opt.batch_size
    outputs = []
    for s in range(0, q.shape[2], size):
        batch = slice(s, s + size)
        n = k[:, :, batch].shape[2]
        start = [P[:, :, None].expand(*P.shape[:2], n, *P.shape[2:]) for P in params]  # one copy of W_s per pair
        G = per_pair_gradients(function_class, start, k[:, :, batch], v[:, :, batch])
        # W_t for every t of the mini-batch: the start minus the running sum of the steps so far, taken as one
        # product with the lower-triangular ones (a cumsum along this middle axis is several times slower on a CPU)
        running = torch.ones(n, n, dtype=q.dtype, device=q.device).tril()
        W_t = [P - (running @ (_per_token(beta[:, :, batch], g) * g).flatten(3)).view_as(g) for P, g in zip(start, G)]
        outputs.append(forward(function_class, W_t, q[:, :, batch]))
        params = tuple(W[:, :, -1] for W in W_t)
    return torch.cat(outputs, dim=2), params


def momentum_sgd(opt: MomentumSGD, function_class, params, q, k, v, beta, eta, alpha):
    """``U_t = η_t U_{t−1} − β_t ∇ℓ(W_{t−1})``, ``W_t = (1 − α_t) W_{t−1} + U_t``, ``o_t = f_{W_t}(q_t)``, per token."""
    B, H, T = beta.shape
    if eta is None:
        eta = beta.new_full((B, H, T), opt.momentum)
    if alpha is None:
        alpha = beta.new_full((B, H, T), opt.weight_decay)
    momentum = tuple(torch.zeros_like(P) for P in params)
    outputs = []
    for t in range(T):
        G = per_pair_gradients(function_class, params, k[:, :, t], v[:, :, t])
        per = lambda x, like: x[:, :, t].reshape(B, H, *[1] * (like.dim() - 2))  # noqa: E731
        momentum = tuple(per(eta, U) * U - per(beta, g) * g for U, g in zip(momentum, G))
        params = tuple((1 - per(alpha, P)) * P + U for P, U in zip(params, momentum))
        outputs.append(forward(function_class, params, q[:, :, t]))
    return torch.stack(outputs, dim=2), params


__all__ = ["forward", "pair_loss", "per_pair_gradients", "mini_batch_gd", "momentum_sgd", "MLP"]
