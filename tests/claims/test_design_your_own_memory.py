"""Chapter 13's claims are really checked: with one parameter changed, the run stops naming the claim it broke."""

import pytest

from tests.claims.mutation import run_mutated

CHAPTER = "solutions/13_design_your_own_memory.ipynb"

MUTATIONS = [
    # gates that never close at the switch forget nothing there: the decay forgets better
    (
        'runs(Point.of(w, "linear", "exact_solve")) for w in',
        'runs(Point.of(w, "linear", "exact_solve", gate_switch=1.0)) for w in',
        "after the switch, gates that close there forget best, ahead of the exponential decay",
    ),
    # two layers swapped: RLS in place of softmax attention regresses better than DeltaNet
    (
        'dn, sm = runs(named_point("deltanet")), runs(named_point("softmax_attention"))',
        'dn, sm = runs(named_point("deltanet")), runs(named_point("rls"))',
        "softmax attention predicts the standing map worse than DeltaNet",
    ),
    # below β = 1 the steps per token no longer coincide with one step
    (
        "stream_gap(3, 1.0)",
        "stream_gap(3, 0.9)",
        "three SGD steps per token at β = 1 give exactly DeltaNet's errors",
    ),
    # the implicit step and online SGD swapped in the chain: the order no longer holds
    (
        'chain = ["gradient_step", "implicit_step", "online_sgd", "steps_per_token", "exact_solve"]',
        'chain = ["gradient_step", "online_sgd", "implicit_step", "steps_per_token", "exact_solve"]',
        "each optimiser of this chain gets closer to the exact fit than the one before",
    ),
    # at N = 4 DeltaNet recalls every pair in every seed: the mean over the seeds is no longer below one
    (
        "sum(recall_at(sgd, 16)) / len(ds.SEEDS) < 1.0",
        "sum(recall_at(sgd, 4)) / len(ds.SEEDS) < 1.0",
        "on average over the seeds, DeltaNet's one step per token on the same memory already misses pairs",
    ),
    # chapter 09's references at RLS's own width: they no longer recall more than RLS
    (
        '("deltanet", 32), ("linear_attention", 32)',
        '("deltanet", 16), ("linear_attention", 16)',
        "and with more state than RLS (d = 32) both recall more than it, in every seed",
    ),
]


@pytest.mark.slow
@pytest.mark.notebook
@pytest.mark.parametrize("old,new,claim", MUTATIONS, ids=[m[2][:40] for m in MUTATIONS])
def test_a_broken_claim_fails_the_run_by_name(old, new, claim):
    error = run_mutated(CHAPTER, old, new)
    assert error is not None and "ClaimFailed" in error and claim in error
