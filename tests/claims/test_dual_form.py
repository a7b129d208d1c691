"""Chapter 05's claims are checked: without momentum, weight decay no longer shrinks W0 by 1 − ηλ/(1 − μ) per step."""

import pytest

from tests.claims.mutation import run_mutated

pytestmark = [pytest.mark.slow, pytest.mark.notebook]


def test_the_weight_decay_claim_fails_without_momentum():
    error = run_mutated(
        "solutions/05_dual_form.ipynb", "momentum=0.9, weight_decay=1e-2", "momentum=0.0, weight_decay=1e-2"
    )
    assert error is not None and "ClaimFailed" in error
    assert "with momentum, W0 decays by about (1 − ηλ/(1 − μ)) per step" in error


def test_replacing_adam_by_sgd_breaks_the_optimiser_comparison():
    # A comparative claim across seeds: with SGD in Adam's row, its naive dual is exact, so "off by a large relative
    # error" fails in every seed.
    error = run_mutated(
        "solutions/05_dual_form.ipynb",
        '"Adam (naive SGD dual)": (torch.optim.Adam, dict(lr=1e-3)),',
        '"Adam (naive SGD dual)": (torch.optim.SGD, dict(lr=1e-3)),',
    )
    assert error is not None and "ClaimFailed" in error
    assert "the naive dual of Adam is off by a large relative error" in error


def test_a_clipping_threshold_that_never_clips_breaks_the_refusal_claim():
    # Gradient clipping at a norm no gradient reaches changes nothing, so the recorder rightly reads the record and
    # "it refuses a record trained with clip_grad_norm_" fails by name.
    error = run_mutated(
        "solutions/05_dual_form.ipynb",
        "nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.01)",
        "nn.utils.clip_grad_norm_(model.parameters(), max_norm=1e6)",
    )
    assert error is not None and "ClaimFailed" in error
    assert "it refuses a record trained with clip_grad_norm_" in error
