"""Checks for chapter 06, test-time regression (parametric). Each compares with :mod:`ttr_edu.regression`.

The exercises use one sequence and one head: ``k, q`` are ``(T, D_k)``, ``v`` is ``(T, D_v)``, a log decay ``g`` is
``(T,)`` and a memory ``S`` is ``(D_k, D_v)`` (read out as ``Sᵀ q``). The references run the package's framework on
the same data in the fla layout ``(1, T, 1, D)``, except the sweep operator's, which is the product it defines, and
RLS's, which is one solve.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from ttr_edu.checks._core import CheckFailed
from ttr_edu.checks._forbid import forbid
from ttr_edu.checks._rules import run_check
from ttr_edu.regression import ExactSolve, Linear, TestTimeRegression, Uniform, regression_weights

__all__ = [
    "check_decay_weights",
    "check_sweep_operator",
    "check_ridge_readout",
    "check_rls_memory",
    "reference_rls_memory",
    "reference_sweep_operator",
    "reference_decay_weights",
    "SOLVERS",
]

# D_k ≠ D_v in most cases, so a transposed memory cannot pass by accident; T = 1 and T < D_k are included.
SHAPES = [(1, 1, 1), (3, 5, 2), (8, 4, 3), (17, 6, 5)]  # (T, D_k, D_v)


def _fla(x: torch.Tensor) -> torch.Tensor:
    return x[None, :, None]  # (T, D) -> (1, T, 1, D); (T,) -> (1, T, 1)


def reference_decay_weights(g: torch.Tensor) -> torch.Tensor:
    """``Γ[t, i] = exp(Σ_{j=i+1..t} g_j)`` for ``i ≤ t``, else 0: ``(T,) -> (T, T)``."""
    return regression_weights(_fla(g))[0, 0]


def reference_sweep_operator(k: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """What one SGD pass over the pairs does to the error of a consistent fit: ``(T, D_k), (T,) -> (D_k, D_k)``.

    With targets ``v_t = S*ᵀ k_t``, one step gives ``S_t − S* = (I − β_t k_t k_tᵀ)(S_{t−1} − S*)``, so a pass over the
    pairs in order multiplies the error by ``M = (I − β_T k_T k_Tᵀ) ⋯ (I − β_1 k_1 k_1ᵀ)``, the first pair's factor
    rightmost (Kaczmarz's method when ``β_t ‖k_t‖² = 1``).
    """
    eye = torch.eye(k.shape[1], dtype=k.dtype)
    M = eye.clone()
    for t in range(k.shape[0]):
        M = (eye - beta[t] * torch.outer(k[t], k[t])) @ M
    return M


def reference_ridge_readout(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ridge: float) -> torch.Tensor:
    """``o_t = S_tᵀ q_t`` with ``S_t = (Σ_{i≤t} k_i k_iᵀ + λI)⁻¹ Σ_{i≤t} k_i v_iᵀ``: ``(T, D_v)``."""
    exact = TestTimeRegression(Uniform(), Linear(), ExactSolve(ridge=ridge))
    return exact(_fla(q), _fla(k), _fla(v), scale=1.0)[0][0, :, 0]


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _decay_cases() -> Iterator[dict]:
    for i, (T, _, _) in enumerate(SHAPES):
        yield {"g": -torch.rand(T, generator=_g(600 + i), dtype=torch.float64)}
    yield {"g": torch.zeros(5, dtype=torch.float64)}  # no decay: the causal mask of ones


def _sweep_cases() -> Iterator[dict]:
    # (T, D_k): one pair, fewer pairs than dimensions, more; keys of any length and steps that differ per pair, so that
    # the order of the factors matters (the reversed product is the transpose) and no step is 1 by accident
    for i, (T, d_k) in enumerate([(1, 3), (4, 6), (9, 5), (12, 16)]):
        gen = _g(610 + i)
        yield {
            "k": torch.randn(T, d_k, generator=gen, dtype=torch.float64),
            "beta": 0.1 + 0.4 * torch.rand(T, generator=gen, dtype=torch.float64),
        }


def _ridge_cases() -> Iterator[dict]:
    for i, (T, d_k, d_v) in enumerate(SHAPES):
        gen = _g(620 + i)
        yield {
            "q": torch.randn(T, d_k, generator=gen, dtype=torch.float64),
            "k": torch.randn(T, d_k, generator=gen, dtype=torch.float64),
            "v": torch.randn(T, d_v, generator=gen, dtype=torch.float64),
            "ridge": [1.0, 0.1, 0.01, 0.5][i],
        }


def _strong_decay_case() -> dict:
    # g = −50 over T = 30: above the diagonal G_t − G_i reaches +1450, so exp(…) overflows to inf, and an answer that
    # masks *after* the exponential computes inf · 0 = NaN there. The reference masks before, as the hint says.
    return {"g": torch.full((30,), -50.0, dtype=torch.float64)}


def check_decay_weights(decay_weights: Callable) -> bool:
    """Check ``decay_weights(g) -> Γ``, ``Γ[t, i] = exp(g_{i+1} + … + g_t)`` below and on the diagonal, else 0.

    The last case has a strong decay (g = −50, T = 30), where masking after the exponential gives NaN above the
    diagonal; the failure message says so. One verdict covers all cases.
    """
    case = _strong_decay_case()
    try:
        got = decay_weights(**{k: v.clone() for k, v in case.items()})
    except Exception:  # a stub, or an error: run_check below reports it with its case
        got = None
    if isinstance(got, torch.Tensor) and got.shape == (30, 30) and not torch.isfinite(got).all():
        bad = (~torch.isfinite(got)).nonzero()[0].tolist()
        raise CheckFailed(
            f"decay_weights: with a strong decay (g = −50, T = 30) your answer holds {got[bad[0], bad[1]].item()} at "
            f"index {tuple(bad)}, above the diagonal. There G_t − G_i is large and positive, exp overflows to inf and "
            "inf · 0 = NaN: mask with −inf *before* the exponential (masked_fill), not by multiplying after it."
        )
    return run_check("decay_weights", decay_weights, reference_decay_weights, [*_decay_cases(), case])


def check_sweep_operator(sweep_operator: Callable) -> bool:
    """Check ``sweep_operator(k, beta) -> M``: the product of ``I − β_t k_t k_tᵀ`` over one pass, the first pair's
    factor rightmost; a product in the reverse order (the transpose) is named in the failure."""
    case = list(_sweep_cases())[-1]  # 12 pairs in 16 dimensions: far from symmetric
    try:
        got = sweep_operator(**{name: value.clone() for name, value in case.items()})
    except Exception:  # a stub, or an error: run_check below reports it with its case
        got = None
    want = reference_sweep_operator(**case)
    if isinstance(got, torch.Tensor) and got.shape == want.shape and torch.allclose(got.double(), want.T, atol=1e-9):
        raise CheckFailed(
            "sweep_operator: your product is the transpose of the pass's: the factors are in reverse order. The first "
            "pair acts on the error first, so its factor I − β_1 k_1 k_1ᵀ must stand rightmost."
        )
    return run_check("sweep_operator", sweep_operator, reference_sweep_operator, _sweep_cases(), rtol=1e-9, atol=1e-10)


def check_ridge_readout(ridge_readout: Callable) -> bool:
    """Check ``ridge_readout(q, k, v, ridge) -> o``, the exact ridge-regression memory read out at every step."""
    return run_check("ridge_readout", ridge_readout, reference_ridge_readout, _ridge_cases(), rtol=1e-6, atol=1e-9)


def reference_rls_memory(k: torch.Tensor, v: torch.Tensor, ridge: float) -> torch.Tensor:
    """The memory after all ``T`` pairs, ``S_T = (Kᵀ K + λ I)⁻¹ Kᵀ V``: ``(T, D_k), (T, D_v) -> (D_k, D_v)``.

    Computed by one solve (the reference may; the exercise's recursion may not).
    """
    eye = torch.eye(k.shape[1], dtype=k.dtype)
    return torch.linalg.solve(k.T @ k + ridge * eye, k.T @ v)


#: Routines that would solve the normal equations instead of running the Sherman–Morrison recursion.
SOLVERS = [
    f"torch.linalg.{name}"
    for name in (
        "solve",
        "solve_ex",
        "inv",
        "inv_ex",
        "lstsq",
        "pinv",
        "cholesky",
        "cholesky_ex",
        "solve_triangular",
        "lu_factor",
        "lu_solve",
    )
]
SOLVERS += [f"torch.{name}" for name in ("inverse", "pinverse", "cholesky_solve", "cholesky_inverse", "linalg_solve")]
SOLVERS += [f"numpy.linalg.{name}" for name in ("solve", "inv", "lstsq", "pinv")]


def _rls_cases() -> Iterator[dict]:
    # (T, D_k, D_v, ridge): T = 1, T < D_k (the ridge matters), T > D_k, a ridge far from 1 both ways (so that
    # P_0 = λI cannot pass for I/λ), and keys of any length (not unit), D_k ≠ D_v.
    for i, (T, d_k, d_v, ridge) in enumerate(
        [(1, 3, 2, 1.0), (4, 6, 3, 0.1), (12, 5, 4, 0.5), (30, 8, 6, 1e-2), (20, 4, 7, 3.0)]
    ):
        gen = _g(640 + i)
        yield {
            "k": 1.5 * torch.randn(T, d_k, generator=gen, dtype=torch.float64),
            "v": torch.randn(T, d_v, generator=gen, dtype=torch.float64),
            "ridge": ridge,
        }


def check_rls_memory(rls_memory: Callable) -> bool:
    """Check ``rls_memory(k, v, ridge) -> S_T``, the exact ridge memory after all pairs, computed by the
    Sherman–Morrison recursion: a linear solve or an inverse called inside the function is reported
    (``ForbiddenCall``)."""
    recursive = forbid(
        rls_memory,
        SOLVERS,
        "keep P_t = (A_t + λI)⁻¹ up to date with the Sherman–Morrison update instead of solving or inverting",
    )
    return run_check("rls_memory", recursive, reference_rls_memory, _rls_cases(), rtol=1e-6, atol=1e-9)
