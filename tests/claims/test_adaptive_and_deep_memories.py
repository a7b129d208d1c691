"""Chapter 08's claims are really checked: with one parameter changed, the run stops naming the claim it broke."""

import pytest

from tests.claims.mutation import run_mutated

CHAPTER = "solutions/08_adaptive_and_deep_memories.ipynb"

MUTATIONS = [
    # an explicit step inside the delta rule's stable range no longer blows up
    (
        "beta = per_token(10.0)",
        "beta = per_token(0.4)",
        "the explicit step blows up where the implicit one stays bounded",
    ),
    # conjugate gradients compared with the exact solve of another ridge
    (
        "ExactSolve(ridge=0.1))(q, k, v, g=g)",
        "ExactSolve(ridge=0.2))(q, k, v, g=g)",
        "D_k conjugate-gradient steps give the exact solve",
    ),
]


@pytest.mark.slow
@pytest.mark.notebook
@pytest.mark.parametrize("old,new,claim", MUTATIONS, ids=[m[2][:40] for m in MUTATIONS])
def test_a_broken_claim_fails_the_run_by_name(old, new, claim):
    error = run_mutated(CHAPTER, old, new)
    assert error is not None and "ClaimFailed" in error and claim in error
