"""Chapter 09's claims are checked: reading the grid's rows with the convolution switched back on makes the ablation
claim fail by name, and the run stops there (CONTRIBUTING.md, "Claims")."""

import pytest

from claims_mutation import run_mutated

NOTEBOOK = "solutions/09_associative_recall.ipynb"


@pytest.mark.slow
@pytest.mark.notebook
def test_ablation_claim_fails_when_the_convolution_is_not_removed():
    error = run_mutated(NOTEBOOK, "without = pick(short_conv=False)", "without = pick(short_conv=True)")
    assert error is not None and "ClaimFailed" in error
    assert "without the short convolution, no layer" in error
