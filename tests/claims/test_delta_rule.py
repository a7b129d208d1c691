"""Chapter 04's claims are checked: with one parameter changed, the run stops naming the claim."""

import pytest

from tests.claims.mutation import run_mutated

pytestmark = [pytest.mark.slow, pytest.mark.notebook]
NOTEBOOK = "solutions/04_delta_rule.ipynb"


def test_the_sqrt_t_claim_fails_when_the_edge_case_is_replaced():
    # The reflection case β‖k‖² = 2 replaced by a contraction: the memory no longer grows like √T.
    error = run_mutated(
        NOTEBOOK, "memory_norms(2.0, lengths, seed=3 + seed)", "memory_norms(1.5, lengths, seed=3 + seed)"
    )
    assert error is not None and "ClaimFailed" in error
    assert "at β‖k‖² = 2 the memory grows like √T" in error


def test_a_sum_rule_in_the_delta_rules_place_breaks_the_comparison():
    # A comparative claim across seeds: with the sum rule trained in both rows, "the delta rule solves the quick run"
    # fails in every seed.
    error = run_mutated(
        NOTEBOOK,
        "model = overwrite.MODELS[label].build(S_quick, 16)",
        'model = overwrite.MODELS["sum, DPFP ν=1"].build(S_quick, 16)',
    )
    assert error is not None and "ClaimFailed" in error
    assert "the delta rule solves the quick run" in error
    assert "in only 0 of 3 seeds" in error


def test_a_paper_limit_below_ours_breaks_the_comparison_with_the_paper():
    # Had the paper's delta rule solved only up to S = 40 of its d_dot = 128, our ν = 1 limit would no longer lie below
    # the paper's, at either grid's resolution, in any seed.
    error = run_mutated(
        NOTEBOOK,
        '"delta, DPFP ν=1": {100: 0.006, 140: 0.047, 200: 0.171},',
        '"delta, DPFP ν=1": {20: 0.006, 40: 0.009, 60: 0.047, 200: 0.171},',
    )
    assert error is not None and "ClaimFailed" in error
    assert "our ν = 1 limit lies below the paper's" in error
