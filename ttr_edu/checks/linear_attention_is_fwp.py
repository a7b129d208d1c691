"""Checks for chapter 02, linear attention is a fast weight programmer.

The student's functions work on one sequence of one head: ``q, k`` are ``(T, D_k)``, ``v`` is ``(T, D_v)`` and the
output is ``(T, D_v)``. Each check compares them with :mod:`ttr_edu.ops.linear_attention` (``scale=1.0``, as the
paper), on random cases where ``D_k ≠ D_v`` so that a transposed state cannot pass by accident.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from ttr_edu.checks._core import run_check
from ttr_edu.ops import linear_attention_chunk, linear_attention_parallel, linear_attention_recurrent
from ttr_edu.ops.feature_maps import elu_plus_one

__all__ = [
    "check_fast_weight_recurrence",
    "check_causal_linear_attention",
    "check_normalized_linear_attention",
    "check_chunk_linear_attention",
]

SHAPES = [(1, 3, 2), (5, 4, 3), (9, 6, 7), (16, 8, 5)]  # (T, D_k, D_v)


def _one_head(op: Callable, **options) -> Callable:
    """Run a fla-layout op on ``(T, D)`` tensors: add and remove the batch and head axes."""

    def reference(q, k, v, **more):
        o, _ = op(q[None, :, None], k[None, :, None], v[None, :, None], scale=1.0, **options, **more)
        return o[0, :, 0]

    return reference


def _cases(seed: int, positive: bool = False) -> Iterator[dict]:
    for i, (t, d_k, d_v) in enumerate(SHAPES):
        g = torch.Generator().manual_seed(seed + i)
        q, k = (torch.randn(t, d_k, generator=g, dtype=torch.float64) for _ in range(2))
        if positive:  # normalised attention needs positive features: apply φ = ELU + 1 first
            q, k = elu_plus_one(q), elu_plus_one(k)
        yield {"q": q, "k": k, "v": torch.randn(t, d_v, generator=g, dtype=torch.float64)}


def check_fast_weight_recurrence(fast_weight_recurrence: Callable) -> bool:
    """Check ``fast_weight_recurrence(q, k, v)``: ``S_t = S_{t-1} + k_t v_tᵀ`` then ``o_t = S_tᵀ q_t``, for every t."""
    return run_check(
        "fast_weight_recurrence", fast_weight_recurrence, _one_head(linear_attention_recurrent), _cases(100)
    )


def check_causal_linear_attention(causal_linear_attention: Callable) -> bool:
    """Check ``causal_linear_attention(q, k, v) = (Q Kᵀ ⊙ M) V`` with ``M`` causal, diagonal included."""
    return run_check(
        "causal_linear_attention", causal_linear_attention, _one_head(linear_attention_parallel), _cases(200)
    )


def check_normalized_linear_attention(normalized_linear_attention: Callable) -> bool:
    """Check ``o_t = S_tᵀ q_t / (z_tᵀ q_t + 1e-6)`` with ``z_t = Σ_{i≤t} k_i`` (on positive features)."""
    return run_check(
        "normalized_linear_attention",
        normalized_linear_attention,
        _one_head(linear_attention_parallel, normalize=True, eps=1e-6),
        _cases(300, positive=True),
    )


def _chunk_cases() -> Iterator[dict]:
    # (T, D_k, D_v, C): T a multiple of C, T not a multiple (a short last chunk), C = 1 (the recurrence), C ≥ T (the
    # parallel form), and several chunks with D_k ≠ D_v.
    for i, (t, d_k, d_v, c) in enumerate([(8, 3, 2, 4), (10, 4, 3, 4), (5, 3, 4, 1), (6, 2, 3, 16), (33, 6, 5, 8)]):
        g = torch.Generator().manual_seed(400 + i)
        q, k = (torch.randn(t, d_k, generator=g, dtype=torch.float64) for _ in range(2))
        yield {"q": q, "k": k, "v": torch.randn(t, d_v, generator=g, dtype=torch.float64), "chunk_size": c}


def check_chunk_linear_attention(chunk_linear_attention: Callable) -> bool:
    """Check ``chunk_linear_attention(q, k, v, chunk_size)``: per chunk ``O_n = Q_n S_n + (Q_n K_nᵀ ⊙ M) V_n``,
    ``S_{n+1} = S_n + K_nᵀ V_n``; any ``T`` (the last chunk may be short)."""
    return run_check(
        "chunk_linear_attention", chunk_linear_attention, _one_head(linear_attention_chunk), _chunk_cases()
    )
