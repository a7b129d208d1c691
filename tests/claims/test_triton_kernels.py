"""The Triton chapter's claims are really checked: change one parameter so that a claim turns false, and the run
stops with ``ClaimFailed`` naming it (CONTRIBUTING.md, "Claims")."""

import pytest

pytest.importorskip("triton")

from tests.claims.mutation import run_mutated  # noqa: E402

CHAPTER = "solutions/12_triton_kernels.ipynb"

MUTATIONS = [
    # the precisions listed the other way round: the order of their spills no longer matches the sentence
    (
        '["spill_loads_bytes"] for p in ptxas_report.PRECISIONS}',
        '["spill_loads_bytes"] for p in reversed(ptxas_report.PRECISIONS)}',
        "ieee products spill far more than tf32x3, which spills more than tf32",
    ),
    # no rounding to tf32: the "tf32" product is then fp32-accurate
    (
        "q_hi, k_hi = to_tf32(q_tile), to_tf32(k_tile)",
        "q_hi, k_hi = q_tile, k_tile",
        "tf32 products are off by about 1e-4 to 1e-3, relative",
    ),
]


@pytest.mark.slow
@pytest.mark.notebook
@pytest.mark.parametrize("old, new, claim", MUTATIONS, ids=[m[2][:40] for m in MUTATIONS])
def test_a_broken_claim_fails_the_run_by_name(old, new, claim):
    error = run_mutated(CHAPTER, old, new)
    assert error is not None and "ClaimFailed" in error and claim in error
