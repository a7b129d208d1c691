"""Chapter 02's claims are really checked: with one parameter changed, the run stops naming the claim."""

import pytest

from tests.claims.mutation import run_mutated

pytestmark = [pytest.mark.slow, pytest.mark.notebook]
NOTEBOOK = "solutions/02_linear_attention_is_fwp.ipynb"


def test_dropping_the_normaliser_breaks_the_average_claim():
    # The "normalised" run without z_t (2.5, the chunk form that drives the experiment once it passes, answered
    # without its division): the output's distance from c grows like t instead of falling like 1/√t.
    error = run_mutated(
        NOTEBOOK,
        "normalised_chunk_fn = normalized_chunk_linear_attention",
        "normalised_chunk_fn = lambda q, k, v, chunk_size: torch.tril(q @ k.T) @ v",
    )
    assert error is not None and "ClaimFailed" in error
    assert "with z_t the distance from c falls like 1/√t" in error


def test_a_recurrence_that_builds_a_t_by_t_matrix_breaks_the_constant_working_memory():
    # A recurrence that also builds one T × T matrix: what it needs beyond output-sized arrays grows with T², and the
    # claim of a constant working memory fails by name.
    error = run_mutated(
        NOTEBOOK,
        '    "recurrent": one_head(linear_attention_recurrent),',
        '    "recurrent": lambda q, k, v: [torch.zeros(len(q), len(q)) + 1, one_head(linear_attention_recurrent)'
        "(q, k, v)][1],",
    )
    assert error is not None and "ClaimFailed" in error
    assert "recurrent: beyond" in error and "the peak memory does not grow with T" in error


def test_swapping_the_compared_forms_breaks_the_timing_order():
    # A comparative claim across seeds: with the two forms of the ratio swapped, "the recurrence is the slowest" fails
    # in every seed, naming the first comparison.
    error = run_mutated(
        NOTEBOOK,
        '[timings[seed]["recurrent"][-1] / timings[seed][other][-1]',
        '[timings[seed][other][-1] / timings[seed]["recurrent"][-1]',
    )
    assert error is not None and "ClaimFailed" in error
    assert "the recurrence takes more than twice as long as the parallel form" in error
    assert "in only 0 of 3 seeds" in error


def test_a_chunk_of_one_token_breaks_the_far_less_drift():
    # The "C = 32" form run with chunks of one token adds into its state once per token, as the recurrence does: its
    # fitted exponent is no longer a small part of the recurrence's, and the ratio claim fails by name.
    error = run_mutated(
        NOTEBOOK,
        '"chunk (C = 32)": lambda *a, **kw: linear_attention_chunk(*a, chunk_size=32, **kw),',
        '"chunk (C = 32)": lambda *a, **kw: linear_attention_chunk(*a, chunk_size=1, **kw),',
    )
    assert error is not None and "ClaimFailed" in error
    assert "the chunk form with C = 32 drifts far less" in error
