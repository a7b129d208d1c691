"""Chapter 07's claims are checked: with a gate that barely forgets, Mesa no longer tracks the switching regimes."""

import pytest

from tests.claims.mutation import run_mutated

pytestmark = [pytest.mark.slow, pytest.mark.notebook]


def test_the_mesa_tracking_claim_fails_when_the_gate_barely_forgets():
    error = run_mutated(
        "solutions/07_test_time_regression_nonparametric.ipynb", "forget = math.log(0.9)", "forget = math.log(0.999)"
    )
    assert error is not None and "ClaimFailed" in error
    assert "gated RLS (Mesa) tracks the regimes: far below ungated RLS" in error


def test_an_ungated_local_linear_attention_in_the_gated_row_breaks_the_comparison():
    # A comparative claim across streams: with a gate that never forgets, "local linear, gated" is the uniform one.
    error = run_mutated(
        "solutions/07_test_time_regression_nonparametric.ipynb",
        'ExactSolve(ridge=1e-2)),\n                            {"scale": 1.0, "g": constant(forget)}',
        'ExactSolve(ridge=1e-2)),\n                            {"scale": 1.0, "g": constant(0.0)}',
    )
    assert error is not None and "ClaimFailed" in error
    assert "the gate makes local linear attention track: far below its uniform version" in error
