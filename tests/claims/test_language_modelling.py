"""The language-modelling chapter's claims fail the run, by name, when their evidence changes."""

import pytest

from tests.claims.mutation import run_mutated

pytestmark = [pytest.mark.slow, pytest.mark.notebook]

CHAPTER = "solutions/10_language_modelling.ipynb"


def test_too_short_a_demo_run_fails_its_claim():
    error = run_mutated(CHAPTER, "batch_size=8, steps=100,", "batch_size=8, steps=2,")
    assert error is not None and "ClaimFailed" in error
    assert "a hundred Adam steps already take the model below 5 bits per byte" in error


def test_a_vote_that_drops_the_signs_no_longer_beats_the_frequencies():
    # the unsigned vote put in the signed vote's place: it names the most frequent label, no better than counting
    error = run_mutated(
        CHAPTER,
        '"signed vote": (signed_vote(labels).argmax(-1) == predictions)',
        '"signed vote": (unsigned.argmax(-1) == predictions)',
    )
    assert error is not None and "ClaimFailed" in error
    assert "the signed vote agrees with the model's prediction more often than the most frequent label" in error
