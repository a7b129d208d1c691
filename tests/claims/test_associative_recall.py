"""Chapter 09's claims are checked: each mutation below makes one sentence false, and the run stops on that claim,
by name (CONTRIBUTING.md, "Claims")."""

import pytest

from tests.claims.mutation import run_mutated

NOTEBOOK = "solutions/09_associative_recall.ipynb"

MUTATIONS = {
    # the filler's copies of keys: measure "V = 8192" on a vocabulary of 1024 instead
    "the filler rarely repeats a key at V = 8192": (
        "for V in (128, 8192)}",
        "for V in (128, 8192)} | {8192: filler_key_copies(mqar_batch(4000, T, N, 1024, "
        "generator=torch.Generator().manual_seed(3)))}",
    ),
    # the wired circuit: keep the shift in the "no shift" copy
    "without the shift the same circuit recalls fewer than one query in ten": (
        "taps[d : 2 * d] = taps[:d]",
        "taps[d : 2 * d] = taps[d : 2 * d]",
    ),
    # the Kaczmarz demo: a small step instead of β = 1 (the delta rule then writes like linear attention)
    "with nearly collinear keys, one delta-rule pass recalls little more than the last pair": (
        "torch.ones(B, n, 1, dtype=torch.float64)",
        "0.01 * torch.ones(B, n, 1, dtype=torch.float64)",
    ),
    # the grid: softmax attention fails in one seed at d = 64
    "softmax attention solves the task at every width": (
        "rows = load_results()",
        "rows = [{**r, 'accuracy': 0.5} if (r['model'], r['d_model'], r['seed']) == ('softmax_attention', 64, 2) "
        "else r for r in load_results()]",
    ),
    # the ablation: one run without the convolution recalls half the queries
    "without the short convolution no run recalls more than 5% of the queries": (
        "best_without = max(r[\"accuracy\"] for r in rows if not r[\"short_conv\"])",
        "best_without = max([0.5] + [r[\"accuracy\"] for r in rows if not r[\"short_conv\"]])",
    ),
}


@pytest.mark.slow
@pytest.mark.notebook
@pytest.mark.parametrize("claim", list(MUTATIONS))
def test_a_false_claim_stops_the_chapter_by_name(claim):
    old, new = MUTATIONS[claim]
    error = run_mutated(NOTEBOOK, old, new)
    assert error is not None and "ClaimFailed" in error, error
    assert claim in error, error
