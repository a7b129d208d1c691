"""Gradient methods for any function class, gradients by autodiff: mini-batch GD (TTT) and momentum (Titans).

The memory is a tuple of parameters per (batch, head): ``(S,)`` for :class:`Linear`, ``(W1, W2)`` for :class:`MLP`.
The loss of one pair is the objective's ``½ ‖v − f(k)‖²``; ``torch.func.grad`` differentiates it and ``vmap`` maps it
over batch, heads and tokens. Nothing here writes a gradient by hand (the ops of :mod:`ttr_edu.ops.ttt` and
:mod:`ttr_edu.ops.titans` do; the tests prove the two agree). Tensors are heads-first, ``q`` already scaled.
"""

from __future__ import annotations

import torch
from torch.func import grad, vmap

from .function_classes import MLP, Linear
from .optimizers import MiniBatchGD, MomentumSGD, OnlineSGD


def forward(function_class, params, x):
    """``f(x)`` for one head's parameters and one input vector ``x`` ``(D_k,)``."""
    if isinstance(function_class, Linear):
        return x @ params[0]
    z = torch.nn.functional.gelu(x @ params[0]) @ params[1]
    if function_class.layer_norm:
        z = torch.nn.functional.layer_norm(z, z.shape[-1:], eps=1e-6)
    return x + z if function_class.residual else z


def pair_loss(function_class, params, k, v):
    """``½ ‖v − f(k)‖²``, the objective's term for one pair."""
    return 0.5 * (forward(function_class, params, k) - v).pow(2).sum()


def _per_head(fn, in_dims):
    """Map ``fn`` over the batch and head axes (the first two of every mapped argument)."""
    return vmap(vmap(fn, in_dims=in_dims), in_dims=in_dims)


def mini_batch_gd(opt, function_class, params, q, k, v, beta):
    """``W_t = W_s − Σ_{s<i≤t} β_i ∇ℓ(W_s; k_i, v_i)``, ``o_t = f_{W_t}(q_t)``; mini-batches of ``opt.batch_size``.

    :class:`OnlineSGD` is the case ``batch_size = 1``. Returns ``o`` ``(B, H, T, D_v)`` and the final parameters.
    """
    size = 1 if isinstance(opt, OnlineSGD) else opt.batch_size
    # the gradient of every token of a mini-batch at one shared starting point: (params, tokens) -> per-token grads
    grads_at = _per_head(vmap(grad(lambda p, k_i, v_i: pair_loss(function_class, p, k_i, v_i)),
                              in_dims=(None, 0, 0)), in_dims=(0, 0, 0))
    read = _per_head(vmap(lambda p, x: forward(function_class, p, x)), in_dims=(0, 0))  # per-token parameters
    outputs = []
    for s in range(0, q.shape[2], size):
        batch = slice(s, s + size)
        G = grads_at(params, k[:, :, batch], v[:, :, batch])  # each (B, H, b, *shape)
        steps = beta[:, :, batch]
        # W_t for every t of the mini-batch: the start minus the running sum of the steps so far
        W_t = tuple(P[:, :, None] - (steps.view(*steps.shape, *[1] * (g.dim() - 3)) * g).cumsum(2)
                    for P, g in zip(params, G))
        outputs.append(read(W_t, q[:, :, batch]))
        params = tuple(W[:, :, -1] for W in W_t)
    return torch.cat(outputs, dim=2), params


def momentum_sgd(opt: MomentumSGD, function_class, params, q, k, v, beta, eta, alpha):
    """``U_t = η_t U_{t−1} − β_t ∇ℓ(W_{t−1})``, ``W_t = (1 − α_t) W_{t−1} + U_t``, ``o_t = f_{W_t}(q_t)``, per token."""
    grads = _per_head(grad(lambda p, k_t, v_t: pair_loss(function_class, p, k_t, v_t)), in_dims=(0, 0, 0))
    read = _per_head(lambda p, x: forward(function_class, p, x), in_dims=(0, 0))
    B, H, T = beta.shape
    if eta is None:
        eta = beta.new_full((B, H, T), opt.momentum)
    if alpha is None:
        alpha = beta.new_full((B, H, T), opt.weight_decay)
    momentum = tuple(torch.zeros_like(P) for P in params)
    outputs = []
    for t in range(T):
        G = grads(params, k[:, :, t], v[:, :, t])
        per = lambda x, like: x[:, :, t].view(B, H, *[1] * (like.dim() - 2))  # noqa: E731
        momentum = tuple(per(eta, U) * U - per(beta, g) * g for U, g in zip(momentum, G))
        params = tuple((1 - per(alpha, P)) * P + U for P, U in zip(params, momentum))
        outputs.append(read(params, q[:, :, t]))
    return torch.stack(outputs, dim=2), params


DEEP_OPTIMIZERS = (MiniBatchGD, MomentumSGD)
__all__ = ["forward", "pair_loss", "mini_batch_gd", "momentum_sgd", "MLP"]
