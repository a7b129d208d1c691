"""Checks for chapter 07, test-time regression (nonparametric). Each compares with :mod:`ttr_edu.regression`.

One sequence, one head: ``q, k`` are ``(T, D_k)``, ``v`` is ``(T, D_v)``; every readout is causal (step ``t`` sees
pairs ``1..t``). The references run the package's framework in the fla layout ``(1, T, 1, D)``. Each exercise is
declared once (:func:`ttr_edu.checks._rules.exercise`); the package's own smoothers (the framework's local classes and
:func:`ttr_edu.ops.local_linear_attention`) are ruled out as answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from ttr_edu.checks._rules import Rules, exercise
from ttr_edu.ops import local_linear_attention
from ttr_edu.regression import ExactSolve, LocalConstant, LocalLinear, TestTimeRegression, Uniform
from ttr_edu.regression.local import _local_constant, _local_linear

__all__ = ["check_nadaraya_watson", "check_local_linear_readout"]

#: (T, D_k, D_v, how the keys are drawn): keys of several lengths, and keys clustered around one direction (their
#: covariance nearly singular, so only the ridge keeps the local line's solve well posed)
SHAPES = [(1, 2, 1, "norms"), (4, 3, 2, "norms"), (9, 2, 3, "norms"), (16, 4, 2, "norms"), (12, 5, 3, "correlated")]

#: the package's own implementations of these readouts, besides the references
_PACKAGE = (
    TestTimeRegression.__call__,
    TestTimeRegression.predict,
    _local_constant,
    _local_linear,
    local_linear_attention,
)


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


def _keys(T: int, d_k: int, how: str, gen: torch.Generator) -> torch.Tensor:
    if how == "correlated":  # one common direction plus a little noise: mean cosine about 0.9
        centre = torch.randn(d_k, generator=gen, dtype=torch.float64)
        return centre + 0.3 * torch.randn(T, d_k, generator=gen, dtype=torch.float64)
    norms = 0.5 + 2 * torch.rand(T, 1, generator=gen, dtype=torch.float64)  # keys of different lengths
    return norms * torch.randn(T, d_k, generator=gen, dtype=torch.float64)


def _cases(seed: int, extra: list[dict]) -> Iterator[dict]:
    for i, (T, d_k, d_v, how) in enumerate(SHAPES):
        gen = torch.Generator().manual_seed(seed + i)
        q = torch.randn(T, d_k, generator=gen, dtype=torch.float64)
        k = _keys(T, d_k, how, gen)
        yield {"q": q, "k": k, "v": torch.randn(T, d_v, generator=gen, dtype=torch.float64), **extra[i]}


def _bandwidth_cases() -> Iterator[dict]:
    return _cases(700, [{"bandwidth": h} for h in (1.0, 0.7, 2.0, 1.3, 0.5)])


def _local_linear_cases() -> Iterator[dict]:
    params = ((1.0, 0.1), (0.5, 0.05), (2.0, 0.2), (1.0, 0.01), (0.7, 0.02))
    return _cases(710, [{"scale": s, "ridge": r} for s, r in params])


@exercise(
    reference=reference_nadaraya_watson,
    cases=_bandwidth_cases,
    rules=Rules(answers=_PACKAGE),
)
def check_nadaraya_watson(nadaraya_watson: Callable) -> bool:
    """Check ``nadaraya_watson(q, k, v, bandwidth)``: the causal Gaussian-kernel smoother (keys of several lengths,
    so a dot-product kernel does not pass by accident)."""


@exercise(
    reference=reference_local_linear_readout,
    cases=_local_linear_cases,
    rules=Rules(answers=_PACKAGE),
    rtol=1e-6,
    atol=1e-9,
)
def check_local_linear_readout(local_linear_readout: Callable) -> bool:
    """Check ``local_linear_readout(q, k, v, scale, ridge)``: the causal local linear fit read out at ``q_t`` (keys
    of several lengths, and clustered keys whose covariance only the ridge keeps invertible)."""
