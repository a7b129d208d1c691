"""The chunkwise algorithms chapter's claims are really checked: change one parameter so that a claim turns false,
and the run stops with ``ClaimFailed`` naming it (CONTRIBUTING.md, "Claims")."""

import pytest

from tests.claims.mutation import run_mutated

CHAPTER = "solutions/11_chunkwise_algorithms.ipynb"


@pytest.mark.slow
@pytest.mark.notebook
def test_memory_optimum_claim_fails_when_the_heads_are_tiny():
    # With D = 4 the per-chunk states are tiny, so the delta rule's memory is smallest at the smallest chunk: the
    # prose's "smallest at an intermediate chunk size" (true at D = 32) must then stop the run.
    error = run_mutated(CHAPTER, "inputs = make_inputs(512)", "inputs = make_inputs(512, D=4)")
    assert error is not None and "ClaimFailed" in error
    assert "peak memory is smallest at a chunk size of the order of D" in error


@pytest.mark.slow
@pytest.mark.notebook
def test_backward_claim_fails_when_a_term_of_the_derivation_is_dropped():
    # without the −Wᵀ dU' term (step 2) the derived dS₀ is no longer autograd's
    error = run_mutated(CHAPTER, "dS0 = q.T @ dO + dS - W.T @ d_pseudo", "dS0 = q.T @ dO + dS")
    assert error is not None and "ClaimFailed" in error
    assert "the derived chunk backward gives autograd's five gradients to rounding" in error
