"""Chapter 03's claims are really checked: with one parameter changed, the run stops naming the claim."""

import pytest

from tests.claims.mutation import run_mutated

pytestmark = [pytest.mark.slow, pytest.mark.notebook]
NOTEBOOK = "solutions/03_feature_maps_and_capacity.ipynb"


def test_keys_that_switch_on_non_neighbours_break_the_one_hot_claim():
    # Switch on r_j and r_{j−2}: DPFP ν = 1 multiplies neighbours only, so every feature of these keys is 0.
    error = run_mutated(NOTEBOOK, "r[j] = r[j - 1] = 1.0", "r[j] = r[j - 2] = 1.0")
    assert error is not None and "ClaimFailed" in error
    assert "the 32 hand-built keys have one-hot features" in error


def test_swapping_favor_for_dpfp_breaks_the_concentration_comparison():
    # A comparative claim across seeds: with DPFP measured in FAVOR+'s row, "FAVOR+ piles its weight on a few keys, more
    # than DPFP" is false in every seed.
    error = run_mutated(
        NOTEBOOK,
        "spec, top3[label] = capacity.MODELS[label], []",
        'spec, top3[label] = capacity.MODELS["DPFP ν=1"], []',
    )
    assert error is not None and "ClaimFailed" in error
    assert "FAVOR+ piles its weight on a few keys" in error
