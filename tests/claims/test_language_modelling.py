"""The language-modelling chapter's claims fail the run, by name, when their evidence changes."""

import pytest

from tests.claims.mutation import run_mutated

pytestmark = [pytest.mark.slow, pytest.mark.notebook]


def test_too_short_a_demo_run_fails_its_claim():
    error = run_mutated("solutions/10_language_modelling.ipynb", "batch_size=8, steps=100,", "batch_size=8, steps=2,")
    assert error is not None and "ClaimFailed" in error
    assert "a hundred Adam steps already take the model below 5 bits per byte" in error
