"""Checks for chapter 07, test-time regression (nonparametric). Each compares with :mod:`ttr_edu.regression`.

One sequence, one head: ``q, k`` are ``(T, D_k)``, ``v`` is ``(T, D_v)``; every readout is causal (step ``t`` sees
pairs ``1..t``). The references run the package's framework in the fla layout ``(1, T, 1, D)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from ttr_edu.checks._rules import run_check
from ttr_edu.regression import ExactSolve, LocalConstant, LocalLinear, TestTimeRegression, Uniform

__all__ = ["check_nadaraya_watson", "check_local_linear_readout"]

SHAPES = [(1, 2, 1), (4, 3, 2), (9, 2, 3), (16, 4, 2)]  # (T, D_k, D_v)


def _fla(x: torch.Tensor) -> torch.Tensor:
    return x[None, :, None]


def reference_nadaraya_watson(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bandwidth: float) -> torch.Tensor:
    """``y_t = Σ_{i≤t} w_ti v_i``, ``w_ti ∝ exp(−‖q_t − k_i‖² / (2 h²))``: ``(T, D_v)``."""
    smoother = TestTimeRegression(Uniform(), LocalConstant("gaussian"), ExactSolve(ridge=0.0))
    return smoother(_fla(q), _fla(k), _fla(v), scale=bandwidth**-2)[0][0, :, 0]


def reference_local_linear_readout(q, k, v, scale: float, ridge: float) -> torch.Tensor:
    """``ŷ_t = v̄ + Σ_vk (Σ_kk + λI)⁻¹ (q_t − k̄)`` with causal weights ``softmax_i(scale q_t·k_i)``: ``(T, D_v)``."""
    local_linear = TestTimeRegression(Uniform(), LocalLinear(), ExactSolve(ridge=ridge))
    return local_linear(_fla(q), _fla(k), _fla(v), scale=scale)[0][0, :, 0]


def _cases(seed: int, extra: list[dict]) -> Iterator[dict]:
    for i, (T, d_k, d_v) in enumerate(SHAPES):
        gen = torch.Generator().manual_seed(seed + i)
        norms = 0.5 + 2 * torch.rand(T, 1, generator=gen, dtype=torch.float64)  # keys of different lengths
        yield {
            "q": torch.randn(T, d_k, generator=gen, dtype=torch.float64),
            "k": norms * torch.randn(T, d_k, generator=gen, dtype=torch.float64),
            "v": torch.randn(T, d_v, generator=gen, dtype=torch.float64),
            **extra[i],
        }


def check_nadaraya_watson(nadaraya_watson: Callable) -> bool:
    """Check ``nadaraya_watson(q, k, v, bandwidth)``: the causal Gaussian-kernel smoother."""
    bandwidths = [{"bandwidth": h} for h in (1.0, 0.7, 2.0, 1.3)]
    return run_check("nadaraya_watson", nadaraya_watson, reference_nadaraya_watson, _cases(700, bandwidths))


def check_local_linear_readout(local_linear_readout: Callable) -> bool:
    """Check ``local_linear_readout(q, k, v, scale, ridge)``: the causal local linear fit read out at ``q_t``."""
    params = [{"scale": s, "ridge": r} for s, r in ((1.0, 0.1), (0.5, 0.05), (2.0, 0.2), (1.0, 0.01))]
    return run_check(
        "local_linear_readout",
        local_linear_readout,
        reference_local_linear_readout,
        _cases(710, params),
        rtol=1e-6,
        atol=1e-9,
    )
