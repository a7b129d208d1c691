"""Chapter 01's claims are really checked: with one parameter changed, the run stops naming the claim."""

import pytest

from tests.claims.mutation import run_mutated

pytestmark = [pytest.mark.slow, pytest.mark.notebook]
NOTEBOOK = "solutions/01_hebbian_memory.ipynb"


def test_too_few_draws_break_the_crosstalk_claim():
    # One draw per N instead of about 40 000/N²: the average is far from (N − 1)/d at small N.
    error = run_mutated(NOTEBOOK, "draws = max(20, 40_000 // n**2)", "draws = 1")
    assert error is not None and "ClaimFailed" in error
    assert "the measured crosstalk energy matches (N − 1)/d within 10%" in error


def test_swapping_two_scalings_breaks_the_collapse_order():
    # A comparative claim across seeds: with N/d swapped for N ln N/d², "N/d collapses worst" is false in every seed.
    error = run_mutated(NOTEBOOK, '"N / d": lambda n, d: n / d,', '"N / d": lambda n, d: n * math.log(n) / d**2,')
    assert error is not None and "ClaimFailed" in error
    assert "the curves collapse better under N/d² than under N/d" in error
    assert "in only 0 of 3 seeds" in error


def test_fitting_against_n_instead_of_n_minus_1_breaks_the_slope_claim():
    # The band around slope 1 is narrow enough to tell N − 1 from N: against N itself the law (N − 1)/d bends at
    # small N and the fitted slope leaves [0.98, 1.02].
    error = run_mutated(
        NOTEBOOK,
        "[n - 1 for n in n_values], [measured[d, seed] for seed in SEEDS]",
        "n_values, [measured[d, seed] for seed in SEEDS]",
    )
    assert error is not None and "ClaimFailed" in error
    assert "crosstalk energy is proportional to N − 1" in error
