"""Chapter 04's claims are checked: with the reflection case β‖k‖² = 2 replaced by a contraction, the √T claim fails."""

import pytest

from tests.claims.mutation import run_mutated

pytestmark = [pytest.mark.slow, pytest.mark.notebook]


def test_the_sqrt_t_claim_fails_when_the_edge_case_is_replaced():
    error = run_mutated("solutions/04_delta_rule.ipynb", "memory_norms(2.0, lengths)", "memory_norms(1.5, lengths)")
    assert error is not None and "ClaimFailed" in error
    assert "at β‖k‖² = 2 the memory grows like √T" in error
