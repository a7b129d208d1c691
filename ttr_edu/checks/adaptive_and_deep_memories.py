"""Checks for chapter 08, adaptive steps and deep memories. Each compares with :mod:`ttr_edu.ops`.

One head, one token: a linear memory ``S`` is ``(D_k, D_v)``, a key ``k`` is ``(D_k,)``, a value ``v`` is ``(D_v,)``;
the MLP memory is ``(W1, W2)`` of shapes ``(D_k, D_h)`` and ``(D_h, D_v)``. The references run the package's ops in
the fla layout ``(1, 1, 1, D)`` (one batch, one token, one head).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from ttr_edu.checks._core import run_check
from ttr_edu.ops import TitansState, longhorn_recurrent, titans_recurrent, ttt_mlp_recurrent

__all__ = ["check_longhorn_step", "check_momentum_step", "check_mlp_gradient_step"]


def _token(x: torch.Tensor) -> torch.Tensor:
    return x[None, None, None]  # (D,) -> (1, 1, 1, D)


def _gate(x: float) -> torch.Tensor:
    return torch.full((1, 1, 1), float(x), dtype=torch.float64)


def reference_longhorn_step(S, k, v, beta) -> torch.Tensor:
    """``argmin_S' ‖S' − S‖² + β ‖S'ᵀk − v‖²``: ``S + ε k (v − Sᵀk)ᵀ``, ``ε = β/(1 + β‖k‖²)``."""
    _, S_new = longhorn_recurrent(
        _token(k), _token(k), _token(v), _gate(beta), scale=1.0, initial_state=S[None, None], output_final_state=True
    )
    return S_new[0, 0]


def reference_momentum_step(S, U, k, v, theta, eta, alpha) -> tuple[torch.Tensor, torch.Tensor]:
    """Titans, linear memory: ``U' = η U − θ k (Sᵀk − v)ᵀ``, ``S' = (1 − α) S + U'``; returns ``(S', U')``."""
    _, state = titans_recurrent(
        _token(k),
        _token(k),
        _token(v),
        _gate(theta),
        _gate(eta),
        _gate(alpha),
        scale=1.0,
        initial_state=TitansState(S[None, None], U[None, None]),
        output_final_state=True,
    )
    return state.memory[0, 0], state.momentum[0, 0]


def reference_mlp_gradient_step(W1, W2, k, v, lr) -> tuple[torch.Tensor, torch.Tensor]:
    """One SGD step on ``½ ‖W2ᵀ GELU(W1ᵀk) − v‖²`` (exact GELU): returns ``(W1', W2')``."""
    _, (W1_new, W2_new) = ttt_mlp_recurrent(
        _token(k),
        _token(k),
        _token(v),
        _gate(lr),
        1,
        scale=1.0,
        initial_state=(W1[None, None], W2[None, None]),
        output_final_state=True,
    )
    return W1_new[0, 0], W2_new[0, 0]


def _cases(seed: int, n: int = 4) -> Iterator[dict]:
    for i in range(n):
        gen = torch.Generator().manual_seed(seed + i)
        d_k, d_v = 2 + i, 3 + (i % 2)
        yield {
            "d_k": d_k,
            "d_v": d_v,
            "gen": gen,
            "k": (0.5 + 1.5 * torch.rand(1, generator=gen, dtype=torch.float64))  # keys of different lengths
            * torch.randn(d_k, generator=gen, dtype=torch.float64),
            "v": torch.randn(d_v, generator=gen, dtype=torch.float64),
        }


def check_longhorn_step(longhorn_step: Callable) -> bool:
    """Check ``longhorn_step(S, k, v, beta)``: the implicit (proximal) step, returns the new ``S``."""
    cases = []
    for c, beta in zip(_cases(800), (0.3, 2.0, 10.0, 0.7)):
        S = torch.randn(c["d_k"], c["d_v"], generator=c["gen"], dtype=torch.float64)
        cases.append({"S": S, "k": c["k"], "v": c["v"], "beta": beta})
    return run_check("longhorn_step", longhorn_step, reference_longhorn_step, cases, inputs_unchanged=True)


def check_momentum_step(momentum_step: Callable) -> bool:
    """Check ``momentum_step(S, U, k, v, theta, eta, alpha)``: Titans' step on a linear memory, returns ``(S, U)``."""
    cases = []
    for c, (theta, eta, alpha) in zip(
        _cases(810), ((0.5, 0.9, 0.1), (0.2, 0.5, 0.3), (1.0, 0.0, 0.0), (0.3, 0.7, 0.6))
    ):
        S = torch.randn(c["d_k"], c["d_v"], generator=c["gen"], dtype=torch.float64)
        U = torch.randn(c["d_k"], c["d_v"], generator=c["gen"], dtype=torch.float64)
        cases.append({"S": S, "U": U, "k": c["k"], "v": c["v"], "theta": theta, "eta": eta, "alpha": alpha})
    return run_check("momentum_step", momentum_step, reference_momentum_step, cases, inputs_unchanged=True)


def check_mlp_gradient_step(mlp_gradient_step: Callable) -> bool:
    """Check ``mlp_gradient_step(W1, W2, k, v, lr)``: one SGD step of a two-layer GELU MLP memory."""
    cases = []
    for c, lr in zip(_cases(820), (0.1, 0.5, 0.05, 1.0)):
        d_h = c["d_k"] + 2
        W1 = torch.randn(c["d_k"], d_h, generator=c["gen"], dtype=torch.float64)
        W2 = torch.randn(d_h, c["d_v"], generator=c["gen"], dtype=torch.float64) / d_h**0.5
        cases.append({"W1": W1, "W2": W2, "k": c["k"], "v": c["v"], "lr": lr})
    return run_check("mlp_gradient_step", mlp_gradient_step, reference_mlp_gradient_step, cases, inputs_unchanged=True)
