"""Checks for chapter 01, Hebbian memory. Each compares the student's function with :mod:`ttr_edu.hebbian`.

Every exercise is declared once (:func:`ttr_edu.checks._rules.exercise`): the same declaration runs in the student's
kernel and in the grading engine. Calling the package's own function (the reference) is ruled out for each. The cases
are as wide as the exercises' text: keys and values of any length and correlated keys, in float64 and float32; "no
Python loop" is held by the number of torch operations the answer runs at two sizes (:class:`~ttr_edu.checks._rules.
OpCount`), and 1.4's "a Python float" by the result's type.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from ttr_edu import hebbian
from ttr_edu.checks._core import random_case
from ttr_edu.checks._rules import OpCount, Rules, exercise

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


def _correlated(n: int, d: int, g: torch.Generator, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``n`` keys of any length sharing one direction (pairwise cosines about 0.3 to 0.5), drawn from ``g``."""
    shared = torch.randn(d, generator=g, dtype=torch.float64)
    return (0.8 * shared + torch.randn(n, d, generator=g, dtype=torch.float64)).to(dtype)


def _write_cases() -> Iterator[dict]:
    for i, (_, d_k, d_v) in enumerate(SHAPES):
        yield random_case(100 + i, W=(d_v, d_k), k=(d_k,), v=(d_v,))
    yield {name: x.float() for name, x in random_case(150, W=(3, 5), k=(5,), v=(3,)).items()}


def _pairs(n: int, d_k: int, d_v: int, g: torch.Generator, dtype: torch.dtype = torch.float64) -> dict:
    return {
        "keys": torch.randn(n, d_k, generator=g, dtype=torch.float64).to(dtype),
        "values": torch.randn(n, d_v, generator=g, dtype=torch.float64).to(dtype),
    }


def _store_cases() -> Iterator[dict]:
    for i, (n, d_k, d_v) in enumerate(SHAPES):
        yield _pairs(n, d_k, d_v, _generator(200 + i))
    yield {
        "keys": _correlated(9, 5, _generator(250)),
        "values": torch.randn(9, 3, generator=_generator(251), dtype=torch.float64),
    }
    yield _pairs(10, 4, 6, _generator(252), torch.float32)


def _store_at(n: int, generator: torch.Generator | None = None) -> dict:
    """``n`` pairs for the loop rule, of the same width at every ``n``: only a loop over the pairs changes the count."""
    return _pairs(n, 6, 5, generator or _generator(n))


def _key_cases() -> Iterator[dict]:
    for i, (n, d_k, _) in enumerate(SHAPES + [(20, 8, 0)]):
        yield {"keys": hebbian.random_unit_keys(n, d_k, seed=300 + i)}
    # Keys of any length (the exercise does not ask for unit keys): there the diagonal k_jᵀk_j differs from its
    # square, so subtracting the diagonal instead of its square no longer passes by accident.
    for i, (n, d_k) in enumerate([(5, 4), (9, 6)]):
        yield {"keys": 1.5 * torch.randn(n, d_k, generator=_generator(350 + i), dtype=torch.float64)}
    yield {"keys": _correlated(7, 5, _generator(360))}
    yield {"keys": _correlated(6, 4, _generator(361), torch.float32)}


def _accuracy_cases() -> Iterator[dict]:
    for i, (n, d_k, _) in enumerate([(4, 16, 0), (16, 16, 0), (40, 16, 0), (64, 32, 0)]):
        keys = hebbian.random_unit_keys(n, d_k, seed=400 + i)
        values = hebbian.random_unit_keys(n, d_k, seed=500 + i)  # random unit values: crosstalk can flip a recall
        yield {"W": hebbian.store(keys, values), "keys": keys, "values": values}
    yield _tie_case()
    # Values of several lengths: the nearest value by dot product is then neither the nearest by cosine nor by
    # Euclidean distance (with values of one length the three agree), and correlated keys, whose crosstalk is large.
    for i, (n, d_k, d_v, dtype) in enumerate([(12, 8, 6, torch.float64), (20, 16, 10, torch.float64),
                                              (12, 8, 6, torch.float32)]):  # fmt: skip
        g = _generator(460 + i)
        keys = torch.nn.functional.normalize(_correlated(n, d_k, g), dim=-1) if i != 1 else None
        keys = keys if keys is not None else hebbian.random_unit_keys(n, d_k, seed=470)
        lengths = torch.exp(torch.empty(n, dtype=torch.float64).uniform_(-1.2, 1.2, generator=g))
        values = lengths[:, None] * torch.nn.functional.normalize(
            torch.randn(n, d_v, generator=g, dtype=torch.float64), dim=-1
        )
        keys, values = keys.to(dtype), values.to(dtype)
        yield {"W": hebbian.store(keys, values), "keys": keys, "values": values}


def _tie_case() -> dict:
    """Identical values tie every score: a tie must count as a failure, so the accuracy is 0."""
    keys = hebbian.random_unit_keys(5, 8, seed=450)
    values = torch.ones(5, 3, dtype=torch.float64)
    return {"W": hebbian.store(keys, values), "keys": keys, "values": values}


_TIE_NOTE = (
    "\n  why this case is special: all 5 stored values are identical, so every score ties with its rivals; "
    "the exercise counts a tie as a failure (own score strictly greater than every rival), so the answer is 0.0"
)


@exercise(reference=hebbian.hebbian_write, cases=_write_cases, rules=Rules(inputs_unchanged=True))
def check_write(write: Callable) -> bool:
    """Check ``write(W, k, v) -> W + v kᵀ`` (shapes ``(D_v, D_k)``, ``(D_k,)``, ``(D_v,)``), leaving ``W`` unchanged."""


_NO_LOOP = "{what} runs the same few operations whatever {n}; a Python loop over {over} runs some for each of them."


@exercise(
    reference=hebbian.store,
    cases=_store_cases,
    rules=Rules(
        op_count=OpCount(
            _store_at,
            sizes=(4, 32),
            high=0.3,
            size_name="N",
            expect=_NO_LOOP.format(what="One matrix product", n="N", over="the pairs"),
        ),
        why="write the sum of outer products as one matrix product",
    ),
)
def check_store(store: Callable) -> bool:
    """Check ``store(keys, values) -> Σ_i v_i k_iᵀ`` (shapes ``(N, D_k)``, ``(N, D_v)`` -> ``(D_v, D_k)``), with one
    matrix product: no Python loop over the pairs."""


@exercise(reference=hebbian.crosstalk_energy, cases=_key_cases)
def check_crosstalk_energy(crosstalk_energy: Callable) -> bool:
    """Check ``crosstalk_energy(keys) -> mean_j Σ_{i≠j} (k_iᵀ k_j)²`` (a scalar)."""


def _recall_note(message: str, case: dict, result: object) -> str:
    if case["values"].shape == (5, 3):
        return _TIE_NOTE
    lengths = torch.linalg.vector_norm(case["values"].double(), dim=-1)
    if lengths.max() > 1.5 * lengths.min():
        return _LENGTHS_NOTE
    return ""


_LENGTHS_NOTE = (
    "\n  why this case is special: the stored values have different lengths, so the value most similar by dot product "
    "is not always the nearest one (Euclidean distance) or the closest in angle (cosine); the exercise compares dot "
    "products"
)


@exercise(
    reference=hebbian.recall_accuracy,
    cases=_accuracy_cases,
    rules=Rules(returns=float),
    atol=1e-12,
    explain=_recall_note,
)
def check_recall_accuracy(recall_accuracy: Callable) -> bool:
    """Check ``recall_accuracy(W, keys, values) -> fraction recalled after nearest-value clean-up`` (by dot product,
    ties failing), as a Python float; values of several lengths tell the dot product from cosine and distance."""


def _memories(r: int, n: int, d_k: int, d_v: int, g: torch.Generator, dtype: torch.dtype = torch.float64) -> dict:
    return {
        "keys": torch.randn(r, n, d_k, generator=g, dtype=torch.float64).to(dtype),
        "values": torch.randn(r, n, d_v, generator=g, dtype=torch.float64).to(dtype),
    }


def _scores_cases() -> Iterator[dict]:
    # (R, N, D_k, D_v); D_k ≠ D_v so that a transposed product cannot pass by accident, R = 1 and N = 1 included.
    for i, (r, n, d_k, d_v) in enumerate([(1, 1, 3, 2), (1, 4, 5, 3), (3, 6, 4, 7), (5, 9, 8, 6)]):
        yield _memories(r, n, d_k, d_v, _generator(600 + i))
    yield _memories(4, 5, 6, 3, _generator(650), torch.float32)


def _scores_at(r: int, generator: torch.Generator | None = None) -> dict:
    """``r`` memories of the same shape for the loop rule: only a loop over them changes the count."""
    return _memories(r, 6, 5, 4, generator or _generator(r))


def _variance_cases() -> Iterator[dict]:
    # N = 2 (no third pair: only the two 1/d terms), N < d, N = d, N > d, N ≫ d.
    for n, d in [(2, 8), (3, 16), (16, 16), (40, 8), (1000, 32)]:
        yield {"n": n, "d": d}


def _fresh_variance(generator: torch.Generator) -> dict:
    """N in [2, 2000] and d in [2, 64] no one has seen: the grader's extra case."""
    return {
        "n": int(torch.randint(2, 2001, (), generator=generator)),
        "d": int(torch.randint(2, 65, (), generator=generator)),
    }


@exercise(
    reference=hebbian.cleanup_scores,
    cases=_scores_cases,
    rules=Rules(
        op_count=OpCount(
            _scores_at,
            sizes=(2, 16),
            high=0.3,
            size_name="R",
            expect=_NO_LOOP.format(what="A batch of matrix products (@ on 3-D tensors)", n="R", over="the memories"),
        ),
        why="compute all R memories at once with batched matrix products",
    ),
)
def check_cleanup_scores(cleanup_scores: Callable) -> bool:
    """Check ``cleanup_scores(keys, values)`` (``(R, N, D_k)``, ``(R, N, D_v)``) ``-> (R, N, N)``, entry
    ``[r, j, i] = v_iᵀ (W_r k_j)``."""


@exercise(
    reference=hebbian.rival_score_variance,
    cases=_variance_cases,
    rules=Rules(returns=float),
    rtol=1e-9,
    atol=0.0,
    fresh=_fresh_variance,
)
def check_rival_score_variance(rival_score_variance: Callable) -> bool:
    """Check ``rival_score_variance(n, d)``: the exact variance of a rival's clean-up score for random unit pairs, as a
    Python float (the exercise says so; a 0-d tensor is refused, naming both)."""
