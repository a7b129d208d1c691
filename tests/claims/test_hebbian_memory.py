"""Chapter 01's claims are really checked: with one parameter changed, the run stops naming the claim."""

import pytest

from tests.claims.mutation import run_mutated

pytestmark = [pytest.mark.slow, pytest.mark.notebook]


def test_too_few_draws_break_the_crosstalk_claim():
    # One draw per N instead of about 4000/N: the average is far from (N − 1)/d at small N.
    error = run_mutated("solutions/01_hebbian_memory.ipynb", "draws = max(20, 4000 // n)", "draws = 1")
    assert error is not None and "ClaimFailed" in error
    assert "the measured crosstalk energy matches (N − 1)/d within 10%" in error
