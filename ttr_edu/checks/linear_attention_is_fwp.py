"""Checks for chapter 02, linear attention is a fast weight programmer.

The student's functions work on one sequence of one head: ``q, k`` are ``(T, D_k)``, ``v`` is ``(T, D_v)`` and the
output is ``(T, D_v)``. Each check compares them with :mod:`ttr_edu.ops.linear_attention` (``scale=1.0``, as the
paper), on random cases where ``D_k ≠ D_v`` so that a transposed state cannot pass by accident, with correlated keys
and in float32 as well as float64. Every exercise is declared once (:func:`ttr_edu.checks._rules.exercise`), and the
package's linear attention ops are ruled out as answers.

Each exercise asks for one form, and the check holds it to that form by what the answer does: the number of torch
operations it runs at two sizes (:class:`~ttr_edu.checks._rules.OpCount`: a loop over the tokens for the recurrence,
no loop for the parallel forms, one step per chunk for the chunk form) and, for the chunk form, its CPU time at two
lengths (:class:`~ttr_edu.checks._rules.LinearCost`: a chunk form that re-sums the whole prefix in every chunk, or
slices a hidden ``T × T`` matrix, costs ``T²``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from ttr_edu.checks._rules import LinearCost, OpCount, Rules, exercise
from ttr_edu.ops import linear_attention_chunk, linear_attention_parallel, linear_attention_recurrent
from ttr_edu.ops.feature_maps import elu_plus_one

__all__ = [
    "check_fast_weight_recurrence",
    "check_causal_linear_attention",
    "check_normalized_linear_attention",
    "check_chunk_linear_attention",
]

SHAPES = [(1, 3, 2), (5, 4, 3), (9, 6, 7), (16, 8, 5)]  # (T, D_k, D_v)

#: every form of linear attention in the package: none of them is the student's answer to any exercise here
LINEAR_ATTENTION = (linear_attention_recurrent, linear_attention_parallel, linear_attention_chunk)


def _fla(x: torch.Tensor) -> torch.Tensor:
    return x[None, :, None]  # (T, D) -> (1, T, 1, D)


def _reference_recurrence(q, k, v):
    """``o_t = S_tᵀ q_t`` with ``S_t = S_{t-1} + k_t v_tᵀ``: the package's recurrent form on one head."""
    return linear_attention_recurrent(_fla(q), _fla(k), _fla(v), scale=1.0)[0][0, :, 0]


def _reference_parallel(q, k, v):
    """``(Q Kᵀ ⊙ M) V``: the package's parallel form on one head."""
    return linear_attention_parallel(_fla(q), _fla(k), _fla(v), scale=1.0)[0][0, :, 0]


def _reference_normalized(q, k, v):
    """``o_t = S_tᵀ q_t / (z_tᵀ q_t + 1e-6)``: the package's parallel form with the normaliser, on one head."""
    return linear_attention_parallel(_fla(q), _fla(k), _fla(v), scale=1.0, normalize=True, eps=1e-6)[0][0, :, 0]


def _reference_chunk(q, k, v, chunk_size):
    """The package's chunk form on one head."""
    return linear_attention_chunk(_fla(q), _fla(k), _fla(v), scale=1.0, chunk_size=chunk_size)[0][0, :, 0]


def _sequence(t: int, d_k: int, d_v: int, g: torch.Generator, *, positive=False, correlated=False, dtype=None):
    """One head's ``q, k, v``; ``correlated`` keys share a direction, ``positive`` ones went through ELU + 1 (as
    normalised attention needs)."""
    q, k = (torch.randn(t, d_k, generator=g, dtype=torch.float64) for _ in range(2))
    if correlated:
        k = k + 1.5 * torch.randn(d_k, generator=g, dtype=torch.float64)
    if positive:
        q, k = elu_plus_one(q), elu_plus_one(k)
    v = torch.randn(t, d_v, generator=g, dtype=torch.float64)
    return {name: x.to(dtype or torch.float64) for name, x in (("q", q), ("k", k), ("v", v))}


def _cases(seed: int, positive: bool = False) -> Iterator[dict]:
    for i, (t, d_k, d_v) in enumerate(SHAPES):
        yield _sequence(t, d_k, d_v, torch.Generator().manual_seed(seed + i), positive=positive)
    yield _sequence(11, 5, 3, torch.Generator().manual_seed(seed + 10), positive=positive, correlated=True)
    yield _sequence(7, 4, 6, torch.Generator().manual_seed(seed + 11), positive=positive, dtype=torch.float32)


def _at_length(t: int, generator: torch.Generator | None = None) -> dict:
    """``T`` tokens of width 4, for the loop rules: only the length changes between the two counts."""
    return _sequence(t, 4, 3, generator or torch.Generator().manual_seed(t))


def _positive_at_length(t: int, generator: torch.Generator | None = None) -> dict:
    return _sequence(t, 4, 3, generator or torch.Generator().manual_seed(t), positive=True)


_WHY_FORMS = "the package's linear attention ops compute what the exercise asks you to write"


@exercise(
    reference=_reference_recurrence,
    cases=lambda: _cases(100),
    rules=Rules(
        answers=LINEAR_ATTENTION,
        op_count=OpCount(
            _at_length,
            sizes=(4, 32),
            low=0.7,
            size_name="T",
            expect="This exercise is the recurrence itself: one write and one read per token, in a Python loop over t "
            "(a parallel form, whose count does not grow with T, is the next exercise).",
        ),
        why="write S_t = S_{t-1} + k_t v_tᵀ, then read o_t = S_tᵀ q_t, token by token",
    ),
)
def check_fast_weight_recurrence(fast_weight_recurrence: Callable) -> bool:
    """Check ``fast_weight_recurrence(q, k, v)``: ``S_t = S_{t-1} + k_t v_tᵀ`` then ``o_t = S_tᵀ q_t``, for every t,
    token by token (a loop over t: its operations grow with ``T``)."""


_NO_LOOP = (
    "The parallel form is a few matrix products and a mask whatever T; a Python loop over the tokens runs operations "
    "for each of them."
)


@exercise(
    reference=_reference_parallel,
    cases=lambda: _cases(200),
    rules=Rules(
        answers=LINEAR_ATTENTION,
        op_count=OpCount(_at_length, sizes=(4, 32), high=0.3, size_name="T", expect=_NO_LOOP),
        why="build the masked score matrix and multiply it by V, no loop",
    ),
)
def check_causal_linear_attention(causal_linear_attention: Callable) -> bool:
    """Check ``causal_linear_attention(q, k, v) = (Q Kᵀ ⊙ M) V`` with ``M`` causal, diagonal included, without a
    loop over the tokens."""


def _normalized_cases() -> Iterator[dict]:
    yield from _cases(300, positive=True)
    # Tiny features: zᵀq is about 1e-7, below ε = 1e-6, so an answer without ε is far off (not only by rounding).
    g = torch.Generator().manual_seed(350)
    q, k = (1e-4 * torch.rand(6, 3, generator=g, dtype=torch.float64) for _ in range(2))
    yield {"q": q, "k": k, "v": torch.randn(6, 2, generator=g, dtype=torch.float64)}


@exercise(
    reference=_reference_normalized,
    cases=_normalized_cases,
    rules=Rules(
        answers=LINEAR_ATTENTION,
        op_count=OpCount(_positive_at_length, sizes=(4, 32), high=0.3, size_name="T", expect=_NO_LOOP),
        why="divide the masked scores' products by their row sums plus ε, in the parallel form",
    ),
)
def check_normalized_linear_attention(normalized_linear_attention: Callable) -> bool:
    """Check ``o_t = S_tᵀ q_t / (z_tᵀ q_t + 1e-6)`` with ``z_t = Σ_{i≤t} k_i`` in the parallel form (on positive
    features; one case has features so small that forgetting ``ε`` changes the answer)."""


def _chunk_cases() -> Iterator[dict]:
    # (T, D_k, D_v, C): T a multiple of C, T not a multiple (a short last chunk), C = 1 (the recurrence), C ≥ T (the
    # parallel form), and several chunks with D_k ≠ D_v; then correlated keys, and float32.
    for i, (t, d_k, d_v, c) in enumerate([(8, 3, 2, 4), (10, 4, 3, 4), (5, 3, 4, 1), (6, 2, 3, 16), (33, 6, 5, 8)]):
        yield {**_sequence(t, d_k, d_v, torch.Generator().manual_seed(400 + i)), "chunk_size": c}
    yield {**_sequence(20, 5, 4, torch.Generator().manual_seed(410), correlated=True), "chunk_size": 6}
    yield {**_sequence(19, 4, 6, torch.Generator().manual_seed(411), dtype=torch.float32), "chunk_size": 4}


def _chunk_at_size(chunk_size: int, generator: torch.Generator | None = None) -> dict:
    """T = 64 tokens cut into chunks of ``chunk_size``: a chunk form runs a few operations per chunk, T/C in all."""
    return {**_sequence(64, 4, 3, generator or torch.Generator().manual_seed(450)), "chunk_size": chunk_size}


def _chunk_at_length(t: int, generator: torch.Generator | None = None) -> dict:
    """``T`` tokens of width 64 in chunks of 16: there re-summing the prefix (``T² d² / C``) outweighs the chunk
    form's own work (``T C d + T d²``) and the Python overhead of its ``T / C`` steps."""
    return {**_sequence(t, 64, 64, generator or torch.Generator().manual_seed(t)), "chunk_size": 16}


@exercise(
    reference=_reference_chunk,
    cases=_chunk_cases,
    rules=Rules(
        answers=LINEAR_ATTENTION,
        op_count=OpCount(
            _chunk_at_size,
            sizes=(4, 32),
            high=-0.5,
            size_name="chunk_size",
            expect="A chunk form takes one step per chunk, T / C of them, so its count falls as the chunks grow; a "
            "loop over single tokens, or one T × T matrix, runs as many operations at every chunk size.",
        ),
        linear_cost=LinearCost(_chunk_at_length, lengths=(512, 4096)),
        why="carry the state S from chunk to chunk and use T × T products nowhere: re-summing every earlier token in "
        "each chunk, or slicing a T × T matrix, costs T²",
    ),
)
def check_chunk_linear_attention(chunk_linear_attention: Callable) -> bool:
    """Check ``chunk_linear_attention(q, k, v, chunk_size)``: per chunk ``O_n = Q_n S_n + (Q_n K_nᵀ ⊙ M) V_n``,
    ``S_{n+1} = S_n + K_nᵀ V_n``; any ``T`` (the last chunk may be short).

    Beyond the values, the check counts the torch operations of one call at ``T = 64`` with ``C = 4`` and ``C = 32``
    (a chunk form runs some per chunk, so fewer at the larger ``C``; a per-token loop or a hidden ``T × T`` matrix as
    many at both) and times the function at ``T = 512`` and ``4096`` (a chunk form's cost is linear in ``T``; one that
    re-sums the prefix in every chunk, or slices a ``T × T`` matrix, grows like ``T²``): such answers are refused
    with a message, before chapter 02's cost measurement would trip over them.
    """
