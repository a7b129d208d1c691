"""Checks for chapter 03, feature maps and capacity. Each compares the student's function with the package's
:mod:`ttr_edu.ops.feature_maps` or :func:`ttr_edu.models.retrieval_loss` on seeded random cases."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator

import torch

from ttr_edu.checks._core import CheckFailed
from ttr_edu.checks._rules import run_check
from ttr_edu.models.retrieval import retrieval_loss, sum_rule_retrieve
from ttr_edu.ops.feature_maps import dpfp, favor_plus, orthogonal_random_features

__all__ = ["check_dpfp", "check_favor_plus", "check_retrieval_loss", "check_sum_rule_retrieve"]


def _dpfp_cases() -> Iterator[dict]:
    for i, (shape, nu) in enumerate([((3,), 1), ((4, 5), 1), ((2, 3, 6), 2), ((7, 4), 3), ((2, 4), 7)]):
        g = torch.Generator().manual_seed(100 + i)
        yield {"x": torch.randn(*shape, generator=g, dtype=torch.float64), "nu": nu}


def _favor_cases() -> Iterator[dict]:
    for i, (n, d, m) in enumerate([(1, 2, 1), (5, 4, 3), (6, 8, 16), (3, 16, 8)]):
        g = torch.Generator().manual_seed(200 + i)
        x = 0.5 * torch.randn(n, d, generator=g, dtype=torch.float64)
        yield {"x": x, "projection": orthogonal_random_features(m, d, generator=g, dtype=torch.float64)}


def _loss_cases() -> Iterator[dict]:
    for i, (b, d_v) in enumerate([(1, 1), (4, 3), (16, 10)]):
        g = torch.Generator().manual_seed(300 + i)
        yield {
            "y": torch.rand(b, d_v, generator=g, dtype=torch.float64),
            "target": torch.randint(d_v, (b,), generator=g),
        }


def check_dpfp(student_dpfp: Callable) -> bool:
    """Check ``dpfp(x, nu)``: ``r = [ReLU(x); ReLU(−x)]``, ``concat_{j=1..ν} r ⊙ roll(r, j)`` over the last axis."""
    try:
        return run_check("dpfp", student_dpfp, dpfp, _dpfp_cases())
    except CheckFailed as err:
        raise CheckFailed(str(err) + _same_numbers_note(student_dpfp)) from None


def _same_numbers_note(student_dpfp: Callable) -> str:
    """When the answer holds the right products in another order (roll the other way), say so."""
    case = next(_dpfp_cases())
    try:
        got = student_dpfp(**case)
    except Exception:  # the first message already shows the error
        return ""
    want = dpfp(**case)
    if (
        isinstance(got, torch.Tensor)
        and got.shape == want.shape
        and torch.allclose(got.sort(dim=-1).values.double(), want.sort(dim=-1).values.double())
    ):
        return (
            "\n  the same products in another order: roll r by +j (torch.roll(r, j, dims=-1)) and keep the "
            "blocks in the order j = 1, ..., ν"
        )
    return ""


def check_favor_plus(student_favor_plus: Callable) -> bool:
    """Check ``favor_plus(x, projection)``: ``exp(−‖x‖²/2)/√(2m) · [exp(Ωx); exp(−Ωx)]``."""
    return run_check("favor_plus", student_favor_plus, favor_plus, _favor_cases(), rtol=1e-9, atol=1e-12)


def check_retrieval_loss(student_loss: Callable) -> bool:
    """Check ``retrieval_loss(y, target) = mean_b ½‖y_b − onehot(target_b)‖²``."""
    return run_check("retrieval_loss", student_loss, retrieval_loss, _loss_cases())


def _sum_rule_cases() -> Iterator[dict]:
    # (B, T, d_dot, D_v): one pair, d_dot ≠ D_v, and a batch; non-negative features as every map of the chapter.
    for i, (b, t, d_dot, d_v) in enumerate([(1, 1, 3, 2), (2, 5, 4, 6), (4, 9, 8, 5)]):
        g = torch.Generator().manual_seed(400 + i)
        yield {
            "phi_k": torch.rand(b, t, d_dot, generator=g, dtype=torch.float64),
            "v": torch.randn(b, t, d_v, generator=g, dtype=torch.float64),
            "phi_q": torch.rand(b, d_dot, generator=g, dtype=torch.float64),
        }
    # Tiny features: zᵀφ(q) is about 1e-8, far below ε = 1e-6, so an answer without ε (or with another ε) is far off
    # here, not only by rounding.
    g = torch.Generator().manual_seed(450)
    yield {
        "phi_k": 1e-4 * torch.rand(2, 3, 4, generator=g, dtype=torch.float64),
        "v": torch.randn(2, 3, 5, generator=g, dtype=torch.float64),
        "phi_q": 1e-4 * torch.rand(2, 4, generator=g, dtype=torch.float64),
    }


def _without_eps(phi_k, v, phi_q):
    """The read-out with ε = 0: ``Sᵀφ(q) / zᵀφ(q)``."""
    numerator = torch.einsum("b t k, b t v, b k -> b v", phi_k, v, phi_q)
    return numerator / torch.einsum("b t k, b k -> b", phi_k, phi_q)[:, None]


def _missing_eps_note(student_sum_rule: Callable) -> str:
    """A line for a failed check when the student's answer is the read-out without ε (on the first case), else ""."""
    case = next(iter(_sum_rule_cases()))
    try:
        with torch.no_grad():
            got = student_sum_rule(**{k: x.clone() for k, x in case.items()})
    except Exception:  # the failure message already shows the student's error
        return ""
    without = _without_eps(**case)
    if isinstance(got, torch.Tensor) and got.shape == without.shape:
        if torch.allclose(got.double(), without, rtol=1e-12, atol=0.0):
            return (
                "\n  note: your answer equals Sᵀφ(q) / zᵀφ(q), without ε: the denominator is zᵀφ(q) + 1e-6. Where "
                "zᵀφ(q) is large the two differ only by rounding-sized amounts, which the check still sees; where the "
                "features are tiny (zᵀφ(q) below ε) they differ completely."
            )
    return ""


def check_sum_rule_retrieve(student_sum_rule: Callable) -> bool:
    """Check ``sum_rule_retrieve(phi_k, v, phi_q) = Sᵀφ(q) / (zᵀφ(q) + 1e-6)``, ``S = Σ_t φ(k_t) v_tᵀ``,
    ``z = Σ_t φ(k_t)``; one case has features so small that forgetting ``ε`` changes the answer completely, and an
    answer without ``ε`` is told so.

    The chapter trains a model through this function, so the check also asks that a gradient flows from the output
    back to ``phi_k`` and ``phi_q`` (an answer computed under ``torch.no_grad()`` or detached has the right values
    and would stop the training)."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):  # one verdict: PASS only once the gradient is checked too
            passed = run_check(
                "sum_rule_retrieve", student_sum_rule, sum_rule_retrieve, _sum_rule_cases(), rtol=1e-9, atol=1e-12
            )
    except CheckFailed as failure:
        note = _missing_eps_note(student_sum_rule)
        if not note:
            raise
        raise CheckFailed(f"{failure}{note}") from None
    if passed:
        case = next(iter(_sum_rule_cases()))
        phi_k, phi_q = case["phi_k"].requires_grad_(), case["phi_q"].requires_grad_()
        y = student_sum_rule(phi_k=phi_k, v=case["v"], phi_q=phi_q)
        if not (isinstance(y, torch.Tensor) and y.requires_grad):
            raise CheckFailed(
                "sum_rule_retrieve: right values, but no gradient flows through your function: its output does not "
                "require grad when phi_k and phi_q do.\n  Was it computed under torch.no_grad(), or with .detach() or "
                ".item()? The training below backpropagates through it into the key and query projections."
            )
    print(captured.getvalue(), end="")
    return passed
