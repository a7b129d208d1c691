"""Checks for chapter 05, the dual form. Each compares the student's function with :mod:`ttr_edu.dual_form`."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from ttr_edu import dual_form
from ttr_edu.checks._core import run_check

__all__ = ["check_dual_output", "check_momentum_rescale", "check_class_votes"]

# D_in ≠ D_out in most cases, so that a transposed product cannot pass by accident.
SHAPES = [(1, 1, 1, 1), (5, 4, 3, 2), (9, 6, 2, 4), (20, 8, 5, 7)]  # (N, D_in, D_out, Q)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _dual_cases() -> Iterator[dict]:
    for i, (n, d_in, d_out, q) in enumerate(SHAPES):
        g = _generator(500 + i)
        yield {
            "W0": torch.randn(d_out, d_in, generator=g, dtype=torch.float64),
            "keys": torch.randn(n, d_in, generator=g, dtype=torch.float64),
            "values": torch.randn(n, d_out, generator=g, dtype=torch.float64),
            "query": torch.randn(q, d_in, generator=g, dtype=torch.float64),
        }


def _momentum_cases() -> Iterator[dict]:
    for momentum, num_steps in [(0.0, 4), (0.5, 1), (0.5, 6), (0.9, 25), (0.99, 3)]:
        yield {"momentum": momentum, "num_steps": num_steps}


def _vote_cases() -> Iterator[dict]:
    # unequal class sizes and one class with no pattern at all: a mean or a count differs from the sum
    for i, (q, n, num_classes) in enumerate([(1, 3, 2), (3, 10, 4), (5, 40, 10)]):
        g = _generator(700 + i)
        labels = torch.randint(0, num_classes - 1, (n,), generator=g)  # the last class stays empty
        labels[0] = 0
        yield {
            "scores": torch.rand(q, n, generator=g, dtype=torch.float64),
            "labels": labels,
            "num_classes": num_classes,
        }


def check_dual_output(dual_output: Callable) -> bool:
    """Check ``dual_output(W0, keys, values, query) -> W₀x + Σ_t e_t (x_tᵀ x)`` for each query row x.

    Shapes: ``W0 (D_out, D_in)``, ``keys (N, D_in)``, ``values (N, D_out)``, ``query (Q, D_in)`` -> ``(Q, D_out)``.
    """
    return run_check("dual_output", dual_output, dual_form.dual_output, _dual_cases(), rtol=1e-10, atol=1e-12)


def check_momentum_rescale(momentum_rescale: Callable) -> bool:
    """Check ``momentum_rescale(momentum, num_steps) -> (T,)`` with entry t−1 equal to ``(1 − μ^{T−t+1})/(1 − μ)``."""
    return run_check("momentum_rescale", momentum_rescale, dual_form.momentum_rescale, _momentum_cases(),
                     rtol=1e-10, atol=1e-12)


def check_class_votes(class_votes: Callable) -> bool:
    """Check ``class_votes(scores, labels, num_classes) -> (Q, C)``, the per-class sum of the scores."""
    return run_check("class_votes", class_votes, dual_form.class_votes, _vote_cases(), rtol=1e-10, atol=1e-12)
