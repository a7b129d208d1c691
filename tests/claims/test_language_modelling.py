"""The language-modelling chapter's claims fail the run, by name, when their evidence changes."""

import pytest

from tests.claims.mutation import run_mutated

pytestmark = [pytest.mark.slow, pytest.mark.notebook]

CHAPTER = "solutions/10_language_modelling.ipynb"


def test_too_short_a_demo_run_fails_its_claim():
    error = run_mutated(CHAPTER, "batch_size=8, steps=100,", "batch_size=8, steps=2,")
    assert error is not None and "ClaimFailed" in error
    assert "a hundred Adam steps already take the model below 5 bits per byte" in error


def test_a_vote_that_only_counts_frequencies_no_longer_beats_them():
    # the most frequent label put in the signed vote's place: it cannot beat the most frequent label
    error = run_mutated(
        CHAPTER,
        '"signed vote": (signed_vote(labels).argmax(-1) == predictions)',
        '"signed vote": (most_frequent == predictions)',
    )
    assert error is not None and "ClaimFailed" in error
    assert "the signed vote agrees with the model's prediction more often than the most frequent label" in error


def test_pushes_that_outweigh_w0_fail_the_claim_that_w0_does_most_of_the_work():
    # every pattern's push scaled up 10⁴ times: without the pushes the predictions change at most positions
    error = run_mutated(CHAPTER, "pattern_pushes = (sim @ mem.values())", "pattern_pushes = 1e4 * (sim @ mem.values())")
    assert error is not None and "ClaimFailed" in error
    assert "in every recording the prediction is mostly the work of W₀" in error


def test_the_paper_order_claim_fails_when_its_two_layers_are_swapped():
    # a comparative claim: with the paper's sum rule read where its delta rule stands, "their sum rule is behind their
    # delta rule in every seed" must stop the run
    error = run_mutated(
        CHAPTER,
        'max(runs("delta_sumnorm", split)), min(runs("linear_katharopoulos", split)),',
        'max(runs("linear_katharopoulos", split)), min(runs("delta_sumnorm", split)),',
    )
    assert error is not None and "ClaimFailed" in error
    assert "as in the paper, their sum rule is behind their delta rule in every seed" in error
