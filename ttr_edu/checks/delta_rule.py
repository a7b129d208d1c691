"""Checks for chapter 04, the delta rule.

The student's functions work on one head: the state ``S`` is ``(D_k, D_v)``, a key ``(D_k,)``, a sequence of keys
``(T, D_k)``. The references are the package's :mod:`ttr_edu.ops.delta_rule` (with the batch and head axes added;
:func:`ttr_edu.ops.delta_rule_pseudo_values` for the pseudo-values) and, for the eigenvalues,
``torch.linalg.eigvalsh`` of the update matrix itself; for the memory's size, the closed form of its recursion
(:func:`reference_predicted_memory_norm`). Each exercise is declared once
(:func:`ttr_edu.checks._rules.exercise`): the same declaration runs in the student's kernel and in the grading engine.
The cases hold keys of several lengths and correlated keys, in float64 and float32; the package's delta-rule ops are
ruled out as answers, and the eigenvalue exercise rules out every eigensolver, decomposition, inverse and solve of
torch, numpy or scipy, however it is reached (their compiled LAPACK routines included; another library's, mpmath's or
sympy's, is not caught). No exercise may change its inputs in place (the default rule).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch

from ttr_edu.checks._rules import Rules, exercise
from ttr_edu.ops import (
    delta_rule_chunk,
    delta_rule_parallel,
    delta_rule_pseudo_values,
    delta_rule_recurrent,
    gated_delta_rule_chunk,
    gated_delta_rule_recurrent,
)

#: the package's delta-rule ops: each computes a step, the states or the pseudo-values that the exercises ask for
DELTA_RULE = (
    delta_rule_recurrent,
    delta_rule_chunk,
    delta_rule_parallel,
    delta_rule_pseudo_values,
    gated_delta_rule_recurrent,
    gated_delta_rule_chunk,
)

__all__ = [
    "check_delta_rule_step",
    "check_update_eigenvalues",
    "check_predicted_memory_norm",
    "check_pseudo_values",
    "reference_predicted_memory_norm",
]


def _reference_step(S, k, v, beta):
    """One token through the package's recurrent delta rule, starting from ``S``."""
    one = (1, 1, 1)
    _, S_next = delta_rule_recurrent(
        k.view(*one, -1),
        k.view(*one, -1),
        v.view(*one, -1),
        torch.full(one, beta, dtype=S.dtype),
        scale=1.0,
        initial_state=S[None, None],
        output_final_state=True,
        check_stability="ignore",
    )
    return S_next[0, 0]


def _reference_eigenvalues(k, beta):
    """The spec: eigenvalues of ``I − β k kᵀ`` (symmetric), ascending."""
    return torch.linalg.eigvalsh(torch.eye(len(k), dtype=k.dtype) - beta * torch.outer(k, k))


def _reference_pseudo_values(k, v, beta):
    """``u_t = β_t (v_t − S_{t−1}ᵀ k_t)`` from the package's :func:`ttr_edu.ops.delta_rule_pseudo_values` (one head)."""
    u = delta_rule_pseudo_values(k[None, :, None], v[None, :, None], beta[None, :, None], check_stability="ignore")
    return u[0, :, 0]


def reference_predicted_memory_norm(b: float, D: int, D_v: int, T: int) -> float:
    """``√E‖S_T‖²`` of the delta rule from ``S_0 = 0``, for unit keys uniform on the sphere of ``R^D``, values with
    independent standard normal entries (``D_v`` of them) and ``b = β‖k‖²``.

    One write gives ``E‖S_t‖² = r E‖S_{t−1}‖² + b² D_v`` with ``r = 1 + (b² − 2b)/D`` (the cross term has mean zero,
    and ``E[k kᵀ] = I/D``), so ``E‖S_T‖² = b² D_v (r^T − 1)/(r − 1)``, and ``b² D_v T`` where ``r = 1`` (``b = 2``).
    """
    ratio = 1 + (b * b - 2 * b) / D
    energy = b * b * D_v * T if ratio == 1 else b * b * D_v * (ratio**T - 1) / (ratio - 1)
    return math.sqrt(energy)


def _step_cases() -> Iterator[dict]:
    for i, (d_k, d_v, beta, dtype) in enumerate(
        [(1, 1, 1.0, torch.float64), (3, 5, 0.5, torch.float64), (6, 4, 0.9, torch.float64),
         (8, 8, 1.7, torch.float64), (5, 3, 0.6, torch.float32)]
    ):  # fmt: skip
        g = torch.Generator().manual_seed(100 + i)
        case = {
            "S": torch.randn(d_k, d_v, generator=g, dtype=torch.float64),
            "k": torch.randn(d_k, generator=g, dtype=torch.float64),
            "v": torch.randn(d_v, generator=g, dtype=torch.float64),
        }
        yield {**{name: x.to(dtype) for name, x in case.items()}, "beta": beta}


def _eigen_cases() -> Iterator[dict]:
    for i, (d_k, beta) in enumerate([(1, 0.5), (2, 1.0), (4, 0.3), (6, 1.9), (5, 2.5)]):
        g = torch.Generator().manual_seed(200 + i)
        yield {"k": 1.5 * torch.randn(d_k, generator=g, dtype=torch.float64), "beta": beta}
    yield {"k": 0.4 * torch.randn(7, generator=torch.Generator().manual_seed(250)), "beta": 0.8}  # float32


def _sequence_cases() -> Iterator[dict]:
    # unit keys (as the chapter's experiment), then keys of lengths 0.5 to 1.3 and correlated keys (an answer that
    # assumes ‖k‖ = 1 fails there), and float32; β‖k‖² stays below 2, where the recurrence is stable
    for i, (t, d_k, d_v) in enumerate([(1, 2, 3), (4, 3, 2), (9, 5, 4), (16, 8, 6)]):
        g = torch.Generator().manual_seed(300 + i)
        k = torch.nn.functional.normalize(torch.randn(t, d_k, generator=g, dtype=torch.float64), dim=-1)
        yield {
            "k": k,
            "v": torch.randn(t, d_v, generator=g, dtype=torch.float64),
            "beta": torch.rand(t, generator=g, dtype=torch.float64),
        }
    for i, (t, d_k, d_v, shared, dtype) in enumerate([(12, 6, 4, 0.0, torch.float64), (10, 5, 3, 1.5, torch.float64),
                                                      (11, 4, 5, 0.0, torch.float32)]):  # fmt: skip
        g = torch.Generator().manual_seed(350 + i)
        k = torch.randn(t, d_k, generator=g, dtype=torch.float64) + shared * torch.randn(
            d_k, generator=g, dtype=torch.float64
        )
        lengths = 0.5 + 0.8 * torch.rand(t, 1, generator=g, dtype=torch.float64)
        yield {
            "k": (lengths * torch.nn.functional.normalize(k, dim=-1)).to(dtype),
            "v": torch.randn(t, d_v, generator=g, dtype=torch.float64).to(dtype),
            "beta": (0.2 + 0.8 * torch.rand(t, generator=g, dtype=torch.float64)).to(dtype),
        }


@exercise(reference=_reference_step, cases=_step_cases, rules=Rules(answers=DELTA_RULE, inputs_unchanged=True))
def check_delta_rule_step(delta_rule_step: Callable) -> bool:
    """Check ``delta_rule_step(S, k, v, beta) = S + β k (v − Sᵀk)ᵀ`` (``S`` is ``(D_k, D_v)``), as a new tensor:
    ``S`` is left unchanged."""


@exercise(
    reference=_reference_eigenvalues,
    cases=_eigen_cases,
    rules=Rules(
        no_solvers=True,
        why="derive the two eigenvalues of I − β k kᵀ (try a vector orthogonal to k, then k itself) and build them",
    ),
    rtol=1e-9,
    atol=1e-9,
)
def check_update_eigenvalues(update_eigenvalues: Callable) -> bool:
    """Check ``update_eigenvalues(k, beta)``: the eigenvalues of ``I − β k kᵀ`` in ascending order, derived, not
    computed: an eigensolver, SVD, inverse or solve (torch, numpy or scipy, however it is reached) is ruled out."""


def _prediction_cases() -> Iterator[dict]:
    # one write; inside, at and past the edge b = 2 (where r = 1 exactly); D ≠ D_v, so swapping them fails; a long T
    for b, D, D_v, T in [
        (1.0, 8, 8, 1),
        (0.5, 4, 3, 10),
        (1.9, 8, 6, 300),
        (2.0, 8, 8, 125),
        (2.0, 16, 5, 7),
        (2.1, 8, 3, 300),
        (2.5, 16, 4, 50),
        (1.5, 3, 2, 1000),
    ]:
        yield {"b": b, "D": D, "D_v": D_v, "T": T}


def _fresh_prediction(generator: torch.Generator) -> dict:
    """Parameters no one has seen, in the public cases' ranges: b in [0.05, 2.5] in steps of 0.01 (2.0 among them;
    elsewhere |r − 1| ≥ 0.01·1.99/16, far from the cancellation an exact-to-1e-9 answer would meet), D in [3, 16],
    D_v in [1, 8], T in [1, 1000]: the grader's extra case."""

    def draw(low: int, high: int) -> int:
        return int(torch.randint(low, high + 1, (), generator=generator))

    return {"b": draw(5, 250) / 100, "D": draw(3, 16), "D_v": draw(1, 8), "T": draw(1, 1000)}


def _precision_note(message: str, case: dict, result: object) -> str:
    """A prediction returned as a float32 (or narrower) tensor keeps about 7 digits: say so, the check asks for 9."""
    if isinstance(result, torch.Tensor) and result.is_floating_point() and torch.finfo(result.dtype).bits < 64:
        kind = str(result.dtype).replace("torch.", "")
        return (
            f"\n  your result is a {kind} tensor, which rounds to about {torch.finfo(result.dtype).eps:.0e} relative; "
            "the check compares to 1e-9. Compute in Python floats (math.sqrt) or in float64"
        )
    return ""


@exercise(
    reference=reference_predicted_memory_norm,
    cases=_prediction_cases,
    rtol=1e-9,
    explain=_precision_note,
    fresh=_fresh_prediction,
)
def check_predicted_memory_norm(predicted_memory_norm: Callable) -> bool:
    """Check ``predicted_memory_norm(b, D, D_v, T) = √E‖S_T‖²`` (see :func:`reference_predicted_memory_norm`),
    inside, at and past the edge ``b = 2`` (a number, or a one-element tensor)."""


@exercise(
    reference=_reference_pseudo_values,
    cases=_sequence_cases,
    rules=Rules(answers=DELTA_RULE),
    rtol=1e-9,
    atol=1e-10,
)
def check_pseudo_values(pseudo_values: Callable) -> bool:
    """Check ``pseudo_values(k, v, beta)``: ``u_t = β_t (v_t − S_{t−1}ᵀ k_t)`` along the delta-rule recurrence."""
