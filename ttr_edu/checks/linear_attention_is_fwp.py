"""Checks for chapter 02, linear attention is a fast weight programmer.

The student's functions work on one sequence of one head: ``q, k`` are ``(T, D_k)``, ``v`` is ``(T, D_v)`` and the
output is ``(T, D_v)``. Each check compares them with :mod:`ttr_edu.ops.linear_attention` (``scale=1.0``, as the
paper), on random cases where ``D_k ≠ D_v`` so that a transposed state cannot pass by accident.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator

import torch

from ttr_edu import profiling
from ttr_edu.checks._core import CheckFailed
from ttr_edu.checks._rules import run_check
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


def _normalized_cases() -> Iterator[dict]:
    yield from _cases(300, positive=True)
    # Tiny features: zᵀq is about 1e-7, below ε = 1e-6, so an answer without ε is far off (not only by rounding).
    g = torch.Generator().manual_seed(350)
    q, k = (1e-4 * torch.rand(6, 3, generator=g, dtype=torch.float64) for _ in range(2))
    yield {"q": q, "k": k, "v": torch.randn(6, 2, generator=g, dtype=torch.float64)}


def check_normalized_linear_attention(normalized_linear_attention: Callable) -> bool:
    """Check ``o_t = S_tᵀ q_t / (z_tᵀ q_t + 1e-6)`` with ``z_t = Σ_{i≤t} k_i`` (on positive features; one case has
    features so small that forgetting ``ε`` changes the answer)."""
    return run_check(
        "normalized_linear_attention",
        normalized_linear_attention,
        _one_head(linear_attention_parallel, normalize=True, eps=1e-6),
        _normalized_cases(),
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
    ``S_{n+1} = S_n + K_nᵀ V_n``; any ``T`` (the last chunk may be short).

    Beyond the values, the check counts the matrix-product FLOPs (:func:`ttr_edu.profiling.matmul_flops`) of one call
    at ``T = 64`` with ``C = 4`` and ``C = 32``: a chunk form does ``4 T C d + 4 T d²`` of them, so they grow with
    ``C``. A per-token loop of outer products does none, and a hidden ``T × T`` matrix does as many at every ``C``:
    both are refused with a message, before chapter 02's cost measurement would trip over them.
    """
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):  # show PASS only once the FLOPs are checked too
        passed = run_check(
            "chunk_linear_attention", chunk_linear_attention, _one_head(linear_attention_chunk), _chunk_cases()
        )
    if passed:
        _check_chunked(chunk_linear_attention)
    print(captured.getvalue(), end="")
    return passed


def _check_chunked(chunk_linear_attention: Callable) -> None:
    g = torch.Generator().manual_seed(450)
    q, k, v = (torch.randn(64, 4, generator=g, dtype=torch.float64) for _ in range(3))
    flops = {c: profiling.matmul_flops(lambda c=c: chunk_linear_attention(q, k, v, c)) for c in (4, 32)}
    counted = f"matrix-product FLOPs at T = 64, d = 4: {flops[4]:,} with chunk_size 4, {flops[32]:,} with 32"
    if flops[32] == 0:
        raise CheckFailed(
            "chunk_linear_attention: right values, but your function ran no matrix product (@, torch.matmul, "
            f"einsum) ({counted}).\n  Did you loop over the tokens one by one? The chunk form computes each chunk "
            "with C × C matrix products: Q_n S_n, (Q_n K_nᵀ ⊙ M) V_n and K_nᵀ V_n."
        )
    if flops[32] < 1.5 * flops[4]:
        raise CheckFailed(
            "chunk_linear_attention: right values, but your function's matrix products do not grow with chunk_size "
            f"({counted}).\n  A chunk form does about 4·T·C·d + 4·T·d² FLOPs: its intra-chunk products grow with C. "
            "Equal counts mean the work ignores the chunks: one T × T matrix, or a loop over single tokens."
        )
