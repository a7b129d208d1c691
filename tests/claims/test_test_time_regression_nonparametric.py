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


def test_an_ungated_deltanet_in_the_gated_row_breaks_the_recovery_order():
    # A comparative claim across streams: without its gate, "gated DeltaNet" is DeltaNet, which recovers slowly.
    error = run_mutated(
        "solutions/07_test_time_regression_nonparametric.ipynb",
        '"g": constant(math.log(0.97))}',
        '"g": constant(0.0)}',
    )
    assert error is not None and "ClaimFailed" in error
    assert "gated DeltaNet recovers fastest right after a switch" in error
