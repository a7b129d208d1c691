"""Chapter 07's claims are checked: with a gate that barely forgets, Mesa no longer tracks the switching regimes."""

import pytest

from tests.claims.mutation import run_mutated

pytestmark = [pytest.mark.slow, pytest.mark.notebook]
NOTEBOOK = "solutions/07_test_time_regression_nonparametric.ipynb"


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


def test_straight_stretches_instead_of_extrema_break_the_bend_claim():
    # Where sin(2x) crosses zero it does not bend: the local line no longer falls short on one side at every point,
    # so "it cuts inside the bend" fails by name.
    error = run_mutated(
        NOTEBOOK,
        "extrema = torch.tensor([-3 * math.pi / 4, -math.pi / 4, math.pi / 4, 3 * math.pi / 4]",
        "extrema = torch.tensor([-math.pi, -math.pi / 2, math.pi / 2, math.pi]",
    )
    assert error is not None and "ClaimFailed" in error
    assert "the local line cuts inside the bend" in error


def test_swapping_the_two_windows_breaks_the_window_trade_off():
    # A comparative claim across seeds: with the windows of 20 and 40 pairs swapped (W → 60 − W), the first window
    # claim the run reaches, "a window of 40 pairs makes softmax attention track" (its settled error under 60 % of the
    # uniform one in every seed), is false: the "40" window now holds 20 pairs, whose settled error is the noisier.
    error = run_mutated(
        NOTEBOOK,
        "(t[None, :] <= t[:, None]) & (t[:, None] - t[None, :] < W)",
        "(t[None, :] <= t[:, None]) & (t[:, None] - t[None, :] < 60 - W)",
    )
    assert error is not None and "ClaimFailed" in error
    assert "a sliding window of 40 pairs makes softmax attention track" in error


def test_noise_claim_fails_when_the_noise_free_runs_get_ten_times_the_noise():
    # the windowed softmax's settled error is estimation error, not value noise: with a large noise instead of none in
    # the comparison runs, "without it the settled error changes by under 5 %" must stop the run
    error = run_mutated(NOTEBOOK, "switch_every=period, noise=noise,", "switch_every=period, noise=noise or 0.5,")
    assert error is not None and "ClaimFailed" in error
    assert "the value noise is not what settles the window of 20 there" in error
