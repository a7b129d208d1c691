"""Checks for chapter 03, feature maps and capacity. Each compares the student's function with the package's
:mod:`ttr_edu.ops.feature_maps` or :mod:`ttr_edu.models.retrieval` on seeded random cases, in float64 and float32.
Every exercise is declared once (:func:`ttr_edu.checks._rules.exercise`).

The sum-rule memory drives the chapter's training, which learns the key and query projections *through* it: its
check compares the gradients that flow back to ``phi_k`` and ``phi_q`` with the reference's (a memory, a normaliser
or a feature detached from the graph has the right values and stalls the training)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from ttr_edu.checks._core import _is_plain_tensor
from ttr_edu.checks._rules import Rules, exercise
from ttr_edu.models.retrieval import retrieval_loss, sum_rule_retrieve
from ttr_edu.ops import linear_attention_chunk, linear_attention_parallel, linear_attention_recurrent
from ttr_edu.ops.feature_maps import dpfp, favor_plus, favor_plus_variance, orthogonal_random_features

__all__ = ["check_dpfp", "check_favor_plus", "check_favor_variance", "check_retrieval_loss", "check_sum_rule_retrieve"]


def _dpfp_cases() -> Iterator[dict]:
    for i, (shape, nu) in enumerate([((3,), 1), ((4, 5), 1), ((2, 3, 6), 2), ((7, 4), 3), ((2, 4), 7)]):
        g = torch.Generator().manual_seed(100 + i)
        yield {"x": torch.randn(*shape, generator=g, dtype=torch.float64), "nu": nu}
    yield {"x": torch.randn(3, 5, generator=torch.Generator().manual_seed(150)), "nu": 2}  # float32


def _favor_cases() -> Iterator[dict]:
    # (n, D_k, m, dtype): m < D_k, m > D_k, and m = D_k (a square Ω, where x Ω and x Ωᵀ have the same shape)
    for i, (n, d, m, dtype) in enumerate(
        [(1, 2, 1, torch.float64), (5, 4, 3, torch.float64), (6, 8, 16, torch.float64), (3, 16, 8, torch.float64),
         (4, 5, 5, torch.float64), (6, 4, 8, torch.float32)]
    ):  # fmt: skip
        g = torch.Generator().manual_seed(200 + i)
        x = 0.5 * torch.randn(n, d, generator=g, dtype=torch.float64)
        projection = orthogonal_random_features(m, d, generator=g, dtype=torch.float64)
        yield {"x": x.to(dtype), "projection": projection.to(dtype)}


def _variance_cases() -> Iterator[dict]:
    """Pairs as wide as the text: several norms (‖q + k‖² from about 0.01 to 5), keys correlated with their queries
    (k = q + noise, where the cross term 2 q·k dominates ‖q + k‖²), the antithetic pair k = −q (variance exactly 0),
    leading axes, m from 1 to 64 (D_k smaller and larger than m), and float32."""
    for i, (shape, scale, m, how) in enumerate(
        [((1, 2), 0.5, 1, "independent"), ((5, 4), 0.05, 3, "independent"), ((6, 16), 0.3, 16, "independent"),
         ((3, 4, 8), 0.2, 64, "independent"), ((7, 6), 0.4, 5, "correlated"), ((4, 5), 0.6, 2, "opposite"),
         ((2, 3), 1.0, 7, "correlated")]
    ):  # fmt: skip
        g = torch.Generator().manual_seed(250 + i)
        q = scale * torch.randn(*shape, generator=g, dtype=torch.float64)
        k = scale * torch.randn(*shape, generator=g, dtype=torch.float64)
        if how == "correlated":
            k = q + 0.3 * k
        elif how == "opposite":
            k = torch.cat([-q[:2], k[2:]])  # two antithetic pairs beside two independent ones
        yield {"q": q, "k": k, "m": m}
    g = torch.Generator().manual_seed(270)
    q, k = 0.4 * torch.randn(2, 6, 8, generator=g)  # float32
    yield {"q": q, "k": q + 0.5 * k, "m": 4}


def _loss_cases() -> Iterator[dict]:
    for i, (b, d_v, dtype) in enumerate([(1, 1, torch.float64), (4, 3, torch.float64), (16, 10, torch.float64),
                                         (6, 5, torch.float32)]):  # fmt: skip
        g = torch.Generator().manual_seed(300 + i)
        yield {
            "y": torch.rand(b, d_v, generator=g, dtype=torch.float64).to(dtype),
            "target": torch.randint(d_v, (b,), generator=g),
        }
    # No target holds the largest symbol: the one-hot width must come from y, not from the targets.
    yield {"y": torch.rand(3, 6, generator=torch.Generator().manual_seed(350), dtype=torch.float64),
           "target": torch.tensor([0, 2, 1])}  # fmt: skip


def _roll_note(message: str, case: dict, result: Any) -> str:
    """When the answer holds the right products in another order (roll the other way), say so."""
    want = dpfp(**case)
    if (
        _is_plain_tensor(result)
        and result.shape == want.shape
        and torch.allclose(result.sort(dim=-1).values.double(), want.sort(dim=-1).values.double())
    ):
        return (
            "\n  the same products in another order: roll r by +j (torch.roll(r, j, dims=-1)) and keep the "
            "blocks in the order j = 1, ..., ν"
        )
    return ""


@exercise(reference=dpfp, cases=_dpfp_cases, explain=_roll_note)
def check_dpfp(student_dpfp: Callable) -> bool:
    """Check ``dpfp(x, nu)``: ``r = [ReLU(x); ReLU(−x)]``, ``concat_{j=1..ν} r ⊙ roll(r, j)`` over the last axis."""


@exercise(reference=favor_plus, cases=_favor_cases, rtol=1e-9, atol=1e-12)
def check_favor_plus(student_favor_plus: Callable) -> bool:
    """Check ``favor_plus(x, projection)``: ``exp(−‖x‖²/2)/√(2m) · [exp(Ωx); exp(−Ωx)]``; one case has a square
    ``Ω``, where ``x Ω`` has the shape of ``x Ωᵀ`` but not its values."""


@exercise(
    reference=retrieval_loss,
    cases=_loss_cases,
    rules=Rules(
        keep_grad=("y",),
        why="the loss is the training objective: the training below follows its gradient through y, so keep y in the "
        "graph",
    ),
)
def check_retrieval_loss(student_loss: Callable) -> bool:
    """Check ``retrieval_loss(y, target) = mean_b ½‖y_b − onehot(target_b)‖²``, the one-hot as wide as ``y``, and its
    gradient with respect to ``y`` (the chapter trains with it: a loss on ``y.detach()`` has the right value and no
    gradient)."""


def _estimate_note(message: str, case: dict, result: Any) -> str:
    """The line every wrong value of 3.5 gets: the check compares with the exact variance, so an estimate from random
    draws fails however close it comes (a slip of the derivation can come as close on one case, so the line does not
    guess which of the two the answer is)."""
    return (
        "\n  note: the check compares your values with the exact variance to 1e-9. A Monte Carlo estimate is not "
        "exact, however many draws it takes: derive the variance by hand and return the closed form."
    )


@exercise(
    reference=favor_plus_variance,
    cases=_variance_cases,
    explain=_estimate_note,
    rules=Rules(why="derive the variance by hand and return the closed form; a Monte Carlo estimate is not exact"),
    rtol=1e-9,
    atol=1e-12,
)
def check_favor_variance(favor_variance: Callable) -> bool:
    """Check ``favor_variance(q, k, m)``: the variance, over ``m`` i.i.d. ``N(0, I)`` rows of Ω, of the FAVOR+ estimate
    ``φ(q)·φ(k)``, ``exp(2 q·k)(cosh ‖q + k‖² − 1)/m``, on pairs of several norms, correlated and antithetic
    (``k = −q``, variance 0) pairs, leading axes and float32. The plausible slips of the derivation (the two halves of
    a row taken as independent, ``‖q‖² + ‖k‖²`` for ``‖q + k‖²``, the second moment for the variance, a missing or
    doubled ``1/m``, ``exp(q·k)`` for ``exp(2 q·k)``, the standard deviation) all differ from it on these cases."""


def _sum_rule_case(b: int, t: int, d_dot: int, d_v: int, g: torch.Generator, *, scale=1.0, shared=0.0, dtype=None):
    """Non-negative features, as every map of the chapter gives; ``shared`` adds a common part to the keys'
    features (correlated keys)."""
    phi_k = scale * (
        torch.rand(b, t, d_dot, generator=g, dtype=torch.float64)
        + shared * torch.rand(d_dot, generator=g, dtype=torch.float64)
    )
    case = {
        "phi_k": phi_k,
        "v": torch.randn(b, t, d_v, generator=g, dtype=torch.float64),
        "phi_q": scale * torch.rand(b, d_dot, generator=g, dtype=torch.float64),
    }
    return {name: x.to(dtype or torch.float64) for name, x in case.items()}


def _sum_rule_cases() -> Iterator[dict]:
    # (B, T, d_dot, D_v), with its seed: a batch with d_dot ≠ D_v first, so that a failure (the gradient's included)
    # is first shown on a case with several tokens, then a larger batch, then one pair (B = T = 1).
    for seed, (b, t, d_dot, d_v) in [(401, (2, 5, 4, 6)), (402, (4, 9, 8, 5)), (400, (1, 1, 3, 2))]:
        yield _sum_rule_case(b, t, d_dot, d_v, torch.Generator().manual_seed(seed))
    # Tiny features: zᵀφ(q) is about 1e-8, far below ε = 1e-6, so an answer without ε (or with another ε) is far off
    # here, not only by rounding.
    yield _sum_rule_case(2, 3, 4, 5, torch.Generator().manual_seed(450), scale=1e-4)
    yield _sum_rule_case(3, 7, 6, 4, torch.Generator().manual_seed(460), shared=2.0)  # correlated keys
    yield _sum_rule_case(2, 6, 5, 3, torch.Generator().manual_seed(470), dtype=torch.float32)


def _without_eps(phi_k, v, phi_q):
    """The read-out with ε = 0: ``Sᵀφ(q) / zᵀφ(q)``."""
    numerator = torch.einsum("b t k, b t v, b k -> b v", phi_k, v, phi_q)
    return numerator / torch.einsum("b t k, b k -> b", phi_k, phi_q)[:, None]


def _missing_eps_note(message: str, case: dict, result: Any) -> str:
    """A line for a failure whose answer is the read-out without ε, else ""."""
    without = _without_eps(**case)
    if _is_plain_tensor(result) and result.shape == without.shape:
        if torch.allclose(result.double(), without.double(), rtol=1e-12, atol=0.0):
            return (
                "\n  note: your answer equals Sᵀφ(q) / zᵀφ(q), without ε: the denominator is zᵀφ(q) + 1e-6. Where "
                "zᵀφ(q) is large the two differ only by rounding-sized amounts, which the check still sees; where the "
                "features are tiny (zᵀφ(q) below ε) they differ completely."
            )
    return ""


@exercise(
    reference=sum_rule_retrieve,
    cases=_sum_rule_cases,
    rules=Rules(
        answers=(linear_attention_recurrent, linear_attention_parallel, linear_attention_chunk),
        keep_grad=("phi_k", "phi_q"),
        why="the training below learns the key and query projections through S, z, φ(k) and φ(q): keep each of them "
        "in the graph",
    ),
    rtol=1e-9,
    atol=1e-12,
    explain=_missing_eps_note,
)
def check_sum_rule_retrieve(student_sum_rule: Callable) -> bool:
    """Check ``sum_rule_retrieve(phi_k, v, phi_q) = Sᵀφ(q) / (zᵀφ(q) + 1e-6)``, ``S = Σ_t φ(k_t) v_tᵀ``,
    ``z = Σ_t φ(k_t)``; one case has features so small that forgetting ``ε`` changes the answer completely, and an
    answer without ``ε`` is told so.

    The chapter trains the key and query projections through this function, so the check also compares the gradients
    your output sends back to ``phi_k`` and ``phi_q`` with the reference's: an answer computed under
    ``torch.no_grad()``, or with ``S``, ``z``, ``φ(k)`` or ``φ(q)`` detached, has the right values and would stall the
    training."""
