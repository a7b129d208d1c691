"""Gradient methods for any function class, gradients by autodiff: mini-batch GD (TTT) and momentum (Titans).

The memory is a tuple of linear maps per (batch, head), with elementwise functions between them: ``(S,)`` for
:class:`Linear`, ``(W1, W2)`` for :class:`MLP`. The loss of one pair is the objective's ``ℓ = ½ ‖v − f(k)‖²``.

Autodiff gives, for every pair ``j`` and every linear map ``z = x W`` of the memory, the gradient at the map's output,
``δ_j = ∂ℓ_j/∂z_j`` (backpropagation, :func:`linear_map_gradients`). The one fact used beyond it is the gradient of a
linear map, ``∇_W ℓ_j = x_j δ_jᵀ``: a rank-one matrix per pair. Nothing here differentiates the MLP by hand (the ops
of :mod:`ttr_edu.ops.ttt` and :mod:`ttr_edu.ops.titans` do; the tests prove the two agree).

With it, the mini-batch of TTT needs no copy of the weights per pair. Its weights after pair ``t`` are
``W_t = W_s − Σ_{j≤t} β_j x_j δ_jᵀ``, so a query's map reads ``h_t W_t = h_t W_s − Σ_{j≤t} β_j (h_t · x_j) δ_j``: causal
linear attention from the map's inputs ``h_t`` over its training inputs ``x_j`` with values ``−β_j δ_j``. This is
the dual form of a layer trained by gradient descent (Irie, Csordás, Schmidhuber 2022; Sun et al. 2024, §2.5, for
TTT), here derived for each map of any such network. Tensors are heads-first, ``q`` already scaled: the functions take
the checked inputs of :class:`~ttr_edu.regression.TestTimeRegression` and are not public API (``__all__`` is empty).
"""

from __future__ import annotations

import torch

from ttr_edu._internal.mlp_memory import layer_norm

from .function_classes import Linear
from .optimizers import MomentumSGD, OnlineSGD


def _apply(params):
    """The plain linear maps: map ``i`` of inputs ``h`` ``(B, H, N, D_in)`` is ``h @ params[i]``."""
    return lambda i, h: h @ params[i]


def forward(function_class, params, x, linear=None):
    """``f(x)`` for inputs ``x`` ``(B, H, N, D_k)`` and parameters ``(B, H, D_in, D_out)``: ``(B, H, N, D_v)``.

    ``linear(i, h)`` computes the memory's i-th linear map of its inputs ``h`` (default ``h @ params[i]``); the
    gradient pass records through it and the dual form of :func:`mini_batch_gd` replaces it.
    """
    linear = _apply(params) if linear is None else linear
    if isinstance(function_class, Linear):
        return linear(0, x)
    z = linear(1, torch.nn.functional.gelu(linear(0, x)))
    if function_class.layer_norm:
        # the ops' written-out LayerNorm, not F.layer_norm: its fused double backward treats the mean and 1/std as
        # constants, so the third derivative an outer model needs here (the inner gradient differentiated twice)
        # comes out wrong (pytorch/pytorch#175754)
        z = layer_norm(z)[0]
    return x + z if function_class.residual else z


def linear_map_gradients(function_class, params, k, v):
    """Per pair and per linear map ``z = x W`` of the memory at ``params``: its input ``x`` and ``δ = ∂ℓ/∂z``.

    Takes the parameters ``(B, H, D_in, D_out)`` of each map, keys ``(B, H, N, D_k)`` and targets ``(B, H, N, D_v)``;
    returns two sequences, one entry per map: the inputs ``(B, H, N, D_in)`` and the gradients ``(B, H, N, D_out)``
    for the ``N`` pairs. Pair ``j``'s loss depends only on row ``j`` of each ``z``, so the gradient of the summed
    loss holds every pair's own ``δ_j``; ``∇_W ℓ_j = x_j δ_jᵀ``. When autograd is on and an input needs a gradient,
    the graph is kept, so that an outer model can differentiate through the inner steps. Under
    ``torch.inference_mode`` the pass runs on ordinary copies (inference tensors cannot be saved for a backward).
    """
    if torch.is_inference_mode_enabled() or any(x.is_inference() for x in (k, v, *params)):
        with torch.inference_mode(False), torch.no_grad():
            params, k, v = [p.clone() for p in params], k.clone(), v.clone()
        with torch.inference_mode(False):
            return linear_map_gradients(function_class, params, k, v)
    # keep the graph only if something upstream needs a gradient: otherwise a plain call in grad mode would hold
    # every step's graph alive through the outputs
    outer = torch.is_grad_enabled() and any(x.requires_grad for x in (k, v, *params))
    inputs, outputs = [], []

    def record(i, h):
        z = h @ params[i]
        if not z.requires_grad:  # nothing upstream needs a gradient: make the map's output a leaf of this pass
            z = z.detach().requires_grad_()
        inputs.append(h)
        outputs.append(z)
        return z

    with torch.enable_grad():
        loss = 0.5 * (forward(function_class, params, k, linear=record) - v).pow(2).sum()
        deltas = torch.autograd.grad(loss, outputs, create_graph=outer)
    if not outer:
        inputs = [x.detach() for x in inputs]
    return inputs, deltas


def mini_batch_gd(opt, function_class, params, q, k, v, beta):
    """``W_t = W_s − Σ_{s<i≤t} β_i ∇ℓ(W_s; k_i, v_i)``, ``o_t = f_{W_t}(q_t)``; mini-batches of ``opt.mini_batch_size``.

    Sun et al. 2024, §2.4 (mini-batch TTT) and §2.5 (its dual form). Takes heads-first ``q, k`` ``(B, H, T, D_k)``
    (``q`` scaled), ``v`` ``(B, H, T, D_v)``, ``beta`` ``(B, H, T)`` and the parameters ``(B, H, D_in, D_out)`` of
    each map; the caller (:class:`TestTimeRegression`) has validated them. Each mini-batch takes one backward pass
    at ``W_s`` and reads the queries through the dual form of every map (module docstring). :class:`OnlineSGD` is
    the case ``mini_batch_size = 1``. Returns ``o`` ``(B, H, T, D_v)`` and the final parameters.
    """
    size = 1 if isinstance(opt, OnlineSGD) else min(opt.mini_batch_size, q.shape[2])  # a mini-batch never exceeds T
    causal = torch.ones(size, size, dtype=torch.bool, device=q.device).tril()
    outputs = []
    for s in range(0, q.shape[2], size):
        batch = slice(s, s + size)
        n = k[:, :, batch].shape[2]
        xs, deltas = linear_map_gradients(function_class, params, k[:, :, batch], v[:, :, batch])
        steps = [beta[:, :, batch, None] * delta for delta in deltas]  # β_j δ_j

        def dual(i, h, xs=xs, steps=steps, start=params, mask=causal[:n, :n]):
            # h_t W_t = h_t W_s − Σ_{j≤t} (h_t · x_j) β_j δ_j
            return h @ start[i] - (h @ xs[i].mT).masked_fill(~mask, 0.0) @ steps[i]

        outputs.append(forward(function_class, params, q[:, :, batch], linear=dual))
        params = tuple(W - x.mT @ step for W, x, step in zip(params, xs, steps))
    return torch.cat(outputs, dim=2), params


def momentum_sgd(opt: MomentumSGD, function_class, params, q, k, v, beta, eta, alpha):
    """``U_t = η_t U_{t−1} − β_t ∇ℓ(W_{t−1})``, ``W_t = (1 − α_t) W_{t−1} + U_t``, ``o_t = f_{W_t}(q_t)``, per token.

    Titans' memory (Behrouz et al. 2024, eqs. 13–14). Takes heads-first ``q, k`` ``(B, H, T, D_k)`` (``q`` scaled),
    ``v`` ``(B, H, T, D_v)``, the per-token ``beta``, ``eta`` and ``alpha`` ``(B, H, T)`` (``None``: the constants of
    ``opt``) and the parameters ``(B, H, D_in, D_out)`` of each map, validated by the caller. Returns ``o``
    ``(B, H, T, D_v)`` and the final parameters.
    """
    B, H, T = beta.shape
    if eta is None:
        eta = beta.new_full((B, H, T), opt.eta)
    if alpha is None:
        alpha = beta.new_full((B, H, T), opt.alpha)
    eta, alpha, beta = (x[..., None, None] for x in (eta, alpha, beta))  # (B, H, T, 1, 1)
    momentum = tuple(torch.zeros_like(P) for P in params)
    outputs = []
    for t in range(T):
        xs, deltas = linear_map_gradients(function_class, params, k[:, :, t, None], v[:, :, t, None])
        G = [x.mT @ delta for x, delta in zip(xs, deltas)]  # ∇_W ℓ = x δᵀ
        momentum = tuple(eta[:, :, t] * U - beta[:, :, t] * g for U, g in zip(momentum, G))
        params = tuple((1 - alpha[:, :, t]) * P + U for P, U in zip(params, momentum))
        outputs.append(forward(function_class, params, q[:, :, t, None]))
    return torch.cat(outputs, dim=2), params


#: Nothing here is public API: these are the solvers behind :class:`~ttr_edu.regression.TestTimeRegression`, which
#: checks their inputs (``named_layer("ttt_mlp")``, ``named_layer("titans")``); :class:`MLP` is the public name of
#: :mod:`.function_classes`.
__all__: list[str] = []
