"""Checks for chapter 01, Hebbian memory. Each compares the student's function with :mod:`ttr_edu.hebbian`.

Every exercise is declared once (:func:`ttr_edu.checks._rules.exercise`): the same declaration runs in the student's
kernel and in the grading engine. Calling the package's own function (the reference) is ruled out for each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from ttr_edu import hebbian
from ttr_edu.checks._core import random_case
from ttr_edu.checks._rules import Rules, exercise

__all__ = [
    "check_write",
    "check_store",
    "check_crosstalk_energy",
    "check_recall_accuracy",
    "check_cleanup_scores",
    "check_rival_score_variance",
]

# D_k ≠ D_v in most cases, so that a transposed outer product cannot pass by accident.
SHAPES = [(1, 1, 1), (3, 5, 4), (7, 6, 2), (12, 8, 8)]  # (N, D_k, D_v)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _write_cases() -> Iterator[dict]:
    for i, (_, d_k, d_v) in enumerate(SHAPES):
        yield random_case(100 + i, W=(d_v, d_k), k=(d_k,), v=(d_v,))


def _store_cases() -> Iterator[dict]:
    for i, (n, d_k, d_v) in enumerate(SHAPES):
        g = _generator(200 + i)
        yield {
            "keys": torch.randn(n, d_k, generator=g, dtype=torch.float64),
            "values": torch.randn(n, d_v, generator=g, dtype=torch.float64),
        }


def _key_cases() -> Iterator[dict]:
    for i, (n, d_k, _) in enumerate(SHAPES + [(20, 8, 0)]):
        yield {"keys": hebbian.random_unit_keys(n, d_k, seed=300 + i)}
    # Keys of any length (the exercise does not ask for unit keys): there the diagonal k_jᵀk_j differs from its
    # square, so subtracting the diagonal instead of its square no longer passes by accident.
    for i, (n, d_k) in enumerate([(5, 4), (9, 6)]):
        yield {"keys": 1.5 * torch.randn(n, d_k, generator=_generator(350 + i), dtype=torch.float64)}


def _accuracy_cases() -> Iterator[dict]:
    for i, (n, d_k, _) in enumerate([(4, 16, 0), (16, 16, 0), (40, 16, 0), (64, 32, 0)]):
        keys = hebbian.random_unit_keys(n, d_k, seed=400 + i)
        values = hebbian.random_unit_keys(n, d_k, seed=500 + i)  # random unit values: crosstalk can flip a recall
        yield {"W": hebbian.store(keys, values), "keys": keys, "values": values}
    yield _tie_case()


def _tie_case() -> dict:
    """Identical values tie every score: a tie must count as a failure, so the accuracy is 0."""
    keys = hebbian.random_unit_keys(5, 8, seed=450)
    values = torch.ones(5, 3, dtype=torch.float64)
    return {"W": hebbian.store(keys, values), "keys": keys, "values": values}


_TIE_NOTE = (
    "\n  why this case is special: all 5 stored values are identical, so every score ties with its rivals; "
    "the exercise counts a tie as a failure (own score strictly greater than every rival), so the answer is 0.0"
)


def _tie_note(message: str, case: dict) -> str:
    return _TIE_NOTE if case["values"].shape == (5, 3) else ""  # the tie case, the only one with 3-dim values


@exercise(reference=hebbian.hebbian_write, cases=_write_cases, rules=Rules(inputs_unchanged=True))
def check_write(write: Callable) -> bool:
    """Check ``write(W, k, v) -> W + v kᵀ`` (shapes ``(D_v, D_k)``, ``(D_k,)``, ``(D_v,)``), leaving ``W`` unchanged."""


@exercise(reference=hebbian.store, cases=_store_cases)
def check_store(store: Callable) -> bool:
    """Check ``store(keys, values) -> Σ_i v_i k_iᵀ`` (shapes ``(N, D_k)``, ``(N, D_v)`` -> ``(D_v, D_k)``)."""


@exercise(reference=hebbian.crosstalk_energy, cases=_key_cases)
def check_crosstalk_energy(crosstalk_energy: Callable) -> bool:
    """Check ``crosstalk_energy(keys) -> mean_j Σ_{i≠j} (k_iᵀ k_j)²`` (a scalar)."""


@exercise(reference=hebbian.recall_accuracy, cases=_accuracy_cases, atol=1e-12, explain=_tie_note)
def check_recall_accuracy(recall_accuracy: Callable) -> bool:
    """Check ``recall_accuracy(W, keys, values) -> fraction recalled after nearest-value clean-up``."""


def _scores_cases() -> Iterator[dict]:
    # (R, N, D_k, D_v); D_k ≠ D_v so that a transposed product cannot pass by accident, R = 1 and N = 1 included.
    for i, (r, n, d_k, d_v) in enumerate([(1, 1, 3, 2), (1, 4, 5, 3), (3, 6, 4, 7), (5, 9, 8, 6)]):
        g = _generator(600 + i)
        yield {
            "keys": torch.randn(r, n, d_k, generator=g, dtype=torch.float64),
            "values": torch.randn(r, n, d_v, generator=g, dtype=torch.float64),
        }


def _variance_cases() -> Iterator[dict]:
    # N = 2 (no third pair: only the two 1/d terms), N < d, N = d, N > d, N ≫ d.
    for n, d in [(2, 8), (3, 16), (16, 16), (40, 8), (1000, 32)]:
        yield {"n": n, "d": d}


@exercise(reference=hebbian.cleanup_scores, cases=_scores_cases)
def check_cleanup_scores(cleanup_scores: Callable) -> bool:
    """Check ``cleanup_scores(keys, values)`` (``(R, N, D_k)``, ``(R, N, D_v)``) ``-> (R, N, N)``, entry
    ``[r, j, i] = v_iᵀ (W_r k_j)``."""


@exercise(reference=hebbian.rival_score_variance, cases=_variance_cases, rtol=1e-9, atol=0.0)
def check_rival_score_variance(rival_score_variance: Callable) -> bool:
    """Check ``rival_score_variance(n, d)``: the exact variance of a rival's clean-up score for random unit pairs."""
