"""Memories that are more than a matrix: the MLP memory of TTT-MLP and Titans, and TTT's inner LayerNorm/residual.

A memory maps a key to a value. The linear one is ``m(x) = Sᵀ x``. The MLP memory (after Sun et al. 2024, TTT-MLP;
Behrouz et al. 2024, Titans) has two layers,

    a = W1ᵀ x  (D_h),   h = GELU(a),   m(x) = W2ᵀ h  (D_v),     W1: (D_k, D_h), W2: (D_h, D_v)

with no biases and the exact (erf) GELU: the course's choices. The official TTT-MLP adds biases and uses the tanh
approximation of GELU, in its forward pass and its hand-written derivative (``sources.yaml``,
``08-ttt-mlp-tanh-gelu``). TTT wraps the memory as ``f(x) = x + LN(m(x))``; here the LayerNorm (without affine
parameters: TTT's learnable scale and shift belong to the outer model) and the residual are switches, off by
default, so that ``f = m``. Every memory here learns from the loss ``ℓ = ½ ‖f(k) − v‖²``.

The gradients are written out (backpropagation by hand, two layers), so that each op shows its whole update rule.
The tests check them against ``torch.func.grad`` of the loss. Shapes are heads-first: ``x`` is ``(B, H, N, D)``
(N tokens at once) and a weight ``(B, H, D_in, D_out)``.
"""

from __future__ import annotations

import math

import torch

from ttr_edu._internal.contract import check_state_parts
from ttr_edu._internal.validation import Dims

_LN_EPS = 1e-6
#: The parts of an MLP memory, named, with their shapes.
MLP_STATE = (("W1", ("B", "H", "D_k", "D_h")), ("W2", ("B", "H", "D_h", "D_v")))


def gelu_derivative(a: torch.Tensor) -> torch.Tensor:
    """``d/da GELU(a) = Φ(a) + a φ(a)`` for the exact GELU ``a Φ(a)`` (Φ, φ: the standard normal cdf and pdf)."""
    cdf = 0.5 * (1.0 + torch.erf(a / math.sqrt(2.0)))
    pdf = torch.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi)
    return cdf + a * pdf


def mlp_hidden(W1: torch.Tensor, x: torch.Tensor):
    """The pre-activation ``a = x W1`` and the hidden layer ``h = GELU(a)``: ``(B, H, N, D_h)`` each."""
    a = x @ W1
    return a, torch.nn.functional.gelu(a)


def layer_norm(z: torch.Tensor):
    """``(z − mean) / std`` over the last axis (no affine parameters); returns it and ``1/std`` for the backward."""
    centred = z - z.mean(-1, keepdim=True)
    inv_std = torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + _LN_EPS)
    return centred * inv_std, inv_std


def layer_norm_backward(grad: torch.Tensor, normed: torch.Tensor, inv_std: torch.Tensor) -> torch.Tensor:
    """The gradient through :func:`layer_norm`: ``(g − mean(g) − n · mean(g ⊙ n)) / std``."""
    return inv_std * (grad - grad.mean(-1, keepdim=True) - normed * (grad * normed).mean(-1, keepdim=True))


def wrap(z: torch.Tensor, x: torch.Tensor, layer_norm_on: bool, residual: bool):
    """``f = [x +] [LN](z)`` from the memory's raw output ``z``; returns ``f`` and what the backward needs."""
    cache = None
    if layer_norm_on:
        z, inv_std = layer_norm(z)
        cache = (z, inv_std)
    return (x + z if residual else z), cache


def unwrap_grad(error: torch.Tensor, cache) -> torch.Tensor:
    """``∂ℓ/∂z`` from ``∂ℓ/∂f = f(k) − v`` (the residual passes the gradient through unchanged)."""
    return error if cache is None else layer_norm_backward(error, *cache)


def check_mlp_state(name: str, state, dims: Dims, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Check an MLP memory ``(W1, W2)`` of shapes ``(B, H, D_k, D_h)`` and ``(B, H, D_h, D_v)`` on the device of
    ``q``, each of q's dtype or the compute dtype (:func:`~ttr_edu._internal.contract.check_state_parts`)."""
    if not isinstance(state, (tuple, list)) or len(state) != 2:
        raise TypeError(
            f"{name}: expected the MLP memory as a pair (W1, W2) of shapes (B, H, D_k, D_h) and (B, H, D_h, D_v), "
            f"got {type(state).__name__}"
        )
    W1, W2 = check_state_parts(name, state, MLP_STATE, dims, q)
    return W1, W2


def check_wrap_flags(layer_norm_on, residual, dims: Dims) -> None:
    for name, flag in (("layer_norm", layer_norm_on), ("residual", residual)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name}: expected a bool, got {type(flag).__name__} {flag!r}")
    if residual and dims["D_k"] != dims["D_v"]:
        raise ValueError(f"residual: f(x) = x + m(x) needs D_k == D_v, got D_k = {dims['D_k']} and D_v = {dims['D_v']}")
