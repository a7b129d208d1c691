"""Chapter 06's claims are checked: with one parameter changed, the run stops naming the claim."""

import pytest

from tests.claims.mutation import run_mutated

pytestmark = [pytest.mark.slow, pytest.mark.notebook]
NOTEBOOK = "solutions/06_test_time_regression_parametric.ipynb"


def test_the_noise_floor_claim_fails_without_noise():
    # Without noise the 32 pairs are fitted exactly: the gap keeps falling, there is no floor.
    error = run_mutated(NOTEBOOK, "values = keys @ W + 0.3 * torch.randn", "values = keys @ W + 0.0 * torch.randn")
    assert error is not None and "ClaimFailed" in error
    assert "in the noisy case the gap nearly levels off at a floor" in error


def test_giving_deltanet_beta_1_the_small_step_breaks_its_place_in_the_order():
    # A comparative claim across seeds: "DeltaNet β = 1" run with β = 0.2 is no longer the worst layer.
    error = run_mutated(
        NOTEBOOK,
        '"DeltaNet β = 1": (TestTimeRegression(Uniform(), Linear(), OnlineSGD()), 1.0, 1.0),',
        '"DeltaNet β = 1": (TestTimeRegression(Uniform(), Linear(), OnlineSGD()), 0.2, 1.0),',
    )
    assert error is not None and "ClaimFailed" in error
    assert "DeltaNet β = 1 recalls the fewest pairs of all layers at every N ≥ d" in error


def test_a_larger_step_for_the_small_step_deltanet_breaks_the_paired_comparison():
    # DeltaNet "β = 0.2" run with β = 1 recalls fewer of the same keys than linear attention at N = 2d and 4d: the
    # paired difference, key by key over the three draws, falls more than 0.1 below zero.
    error = run_mutated(
        NOTEBOOK,
        '"DeltaNet β = 0.2": (TestTimeRegression(Uniform(), Linear(), OnlineSGD()), 0.2, 1.0),',
        '"DeltaNet β = 0.2": (TestTimeRegression(Uniform(), Linear(), OnlineSGD()), 1.0, 1.0),',
    )
    assert error is not None and "ClaimFailed" in error
    assert "DeltaNet with β = 0.2 recalls no worse than linear attention at N = 2d and 4d" in error


def test_a_faster_sweep_breaks_the_tail_rate():
    # A step of 0.9 instead of 0.5 in the consistent case changes the tail's rate, while ρ is still computed for
    # β = 0.5: the decay per pass at 256–512 passes no longer equals −ln ρ.
    error = run_mutated(
        NOTEBOOK,
        "consistent[seed] = gaps_to_exact(keys, keys @ W, BETA, passes)",
        "consistent[seed] = gaps_to_exact(keys, keys @ W, 0.9, passes)",
    )
    assert error is not None and "ClaimFailed" in error
    assert "the tail is geometric at the slowest mode's rate" in error


def test_the_first_order_estimate_misses_the_slowest_rate():
    # 1 − ρ ≈ βλ_min (first order in β) instead of 2βλ_min/(2 − β): a third too small at β = 0.5, outside 2%.
    error = run_mutated(
        NOTEBOOK,
        "predicted = {seed: 2 * BETA * lambda_min[seed] / (2 - BETA) for seed in SEEDS}",
        "predicted = {seed: BETA * lambda_min[seed] for seed in SEEDS}",
    )
    assert error is not None and "ClaimFailed" in error
    assert "1 − ρ follows from the keys' Gram matrix" in error


def test_the_recall_thresholds_move_with_d():
    # The rerun at half the dimension, run at the chapter's d instead, recalls exactly as much: the claim that fewer
    # dimensions recall less at the same N/d (what makes the table's thresholds this d's, not laws in units of d) fails.
    error = run_mutated(NOTEBOOK, "small_d = d // 2  # the same", "small_d = d  # the same")
    assert error is not None and "ClaimFailed" in error
    assert "at the same N/d, fewer dimensions recall less" in error


def test_three_draws_of_the_keys_would_trust_the_rate_at_beta_1():
    # The chapter's three seeds alone fit 2βλ_min/(2 − β) within 1% at β = 1; only over many draws of the keys does
    # the estimate miss by more than 6% at that step, which is why the text limits it to β ≤ 0.5.
    error = run_mutated(NOTEBOOK, "DRAWS = range(100)", "DRAWS = range(3)")
    assert error is not None and "ClaimFailed" in error
    assert "but not at β = 1: there it misses 1 − ρ by more than 6% for some of the draws" in error
