"""Checks for chapter 03, feature maps and capacity. Each compares the student's function with the package's
:mod:`ttr_edu.ops.feature_maps` or :func:`ttr_edu.models.retrieval_loss` on seeded random cases."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from ttr_edu.checks._core import run_check
from ttr_edu.models import retrieval_loss
from ttr_edu.ops.feature_maps import dpfp, favor_plus, orthogonal_random_features

__all__ = ["check_dpfp", "check_favor_plus", "check_retrieval_loss"]


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
        yield {"y": torch.rand(b, d_v, generator=g, dtype=torch.float64),
               "target": torch.randint(d_v, (b,), generator=g)}


def check_dpfp(student_dpfp: Callable) -> bool:
    """Check ``dpfp(x, nu)``: ``r = [ReLU(x); ReLU(−x)]``, ``concat_{j=1..ν} r ⊙ roll(r, j)`` over the last axis."""
    return run_check("dpfp", student_dpfp, dpfp, _dpfp_cases())


def check_favor_plus(student_favor_plus: Callable) -> bool:
    """Check ``favor_plus(x, projection)``: ``exp(−‖x‖²/2)/√(2m) · [exp(Ωx); exp(−Ωx)]``."""
    return run_check("favor_plus", student_favor_plus, favor_plus, _favor_cases(), rtol=1e-9, atol=1e-12)


def check_retrieval_loss(student_loss: Callable) -> bool:
    """Check ``retrieval_loss(y, target) = mean_b ½‖y_b − onehot(target_b)‖²``."""
    return run_check("retrieval_loss", student_loss, retrieval_loss, _loss_cases())
