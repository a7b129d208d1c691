"""Chapter 02's claims are really checked: with one parameter changed, the run stops naming the claim."""

import pytest

from tests.claims.mutation import run_mutated

pytestmark = [pytest.mark.slow, pytest.mark.notebook]


def test_noisy_values_break_the_normaliser_claim():
    # Values that scatter around c by 30 times more: the normalised output no longer sits within 5% of c.
    error = run_mutated(
        "solutions/02_linear_attention_is_fwp.ipynb", "v1 = c + 0.1 * torch.randn", "v1 = c + 3.0 * torch.randn"
    )
    assert error is not None and "ClaimFailed" in error
    assert "with z_t the output stays at c" in error


def test_swapping_the_recurrence_for_a_chunk_form_breaks_the_timing_order():
    # A comparative claim across seeds: with the recurrence replaced by the package's chunk form, "the recurrence
    # is the slowest" no longer holds in any seed.
    error = run_mutated(
        "solutions/02_linear_attention_is_fwp.ipynb",
        '"recurrent": one_head(linear_attention_recurrent),',
        '"recurrent": one_head(linear_attention_chunk),',
    )
    assert error is not None and "ClaimFailed" in error
    assert "the recurrence takes more than twice as long as the chunk form" in error
