"""Chapter 06's claims are checked: without noise, the 32-pair run has no floor, and the claim of one fails."""

import pytest

from tests.claims.mutation import run_mutated

pytestmark = [pytest.mark.slow, pytest.mark.notebook]


def test_the_noise_floor_claim_fails_without_noise():
    error = run_mutated("solutions/06_test_time_regression_parametric.ipynb", "(32, 0.3)", "(32, 0.0)")
    assert error is not None and "ClaimFailed" in error
    assert "in the noisy case the gap levels off at a floor" in error
