"""Chapter 06's claims are checked: with one parameter changed, the run stops naming the claim."""

import pytest

from tests.claims.mutation import run_mutated

pytestmark = [pytest.mark.slow, pytest.mark.notebook]
NOTEBOOK = "solutions/06_test_time_regression_parametric.ipynb"


def test_the_noise_floor_claim_fails_without_noise():
    # Without noise the 32 pairs are fitted exactly: the gap keeps falling, there is no floor.
    error = run_mutated(NOTEBOOK, "values = keys @ W + 0.3 * torch.randn", "values = keys @ W + 0.0 * torch.randn")
    assert error is not None and "ClaimFailed" in error
    assert "in the noisy case the gap levels off at a floor" in error


def test_giving_deltanet_beta_1_the_small_step_breaks_its_place_in_the_order():
    # A comparative claim across seeds: "DeltaNet β = 1" run with β = 0.2 is no longer the worst layer.
    error = run_mutated(
        NOTEBOOK,
        '"DeltaNet β = 1": (TestTimeRegression(Uniform(), Linear(), OnlineSGD()), 1.0, 1.0),',
        '"DeltaNet β = 1": (TestTimeRegression(Uniform(), Linear(), OnlineSGD()), 0.2, 1.0),',
    )
    assert error is not None and "ClaimFailed" in error
    assert "DeltaNet β = 1 recalls the fewest pairs of all layers at every N ≥ d" in error


def test_a_larger_step_for_the_small_step_deltanet_breaks_the_paired_match():
    # DeltaNet "β = 0.2" run with β = 1 recalls fewer of the same keys than linear attention at N = d and 2d: the paired
    # comparison, key by key, no longer balances within 3 standard errors.
    error = run_mutated(
        NOTEBOOK,
        '"DeltaNet β = 0.2": (TestTimeRegression(Uniform(), Linear(), OnlineSGD()), 0.2, 1.0),',
        '"DeltaNet β = 0.2": (TestTimeRegression(Uniform(), Linear(), OnlineSGD()), 1.0, 1.0),',
    )
    assert error is not None and "ClaimFailed" in error
    assert "DeltaNet with β = 0.2 matches linear attention up to N = 4d" in error
