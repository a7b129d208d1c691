"""Chapter 03's claims are really checked: with one parameter changed, the run stops naming the claim."""

import re

import nbformat
import pytest

from tests.claims.mutation import ROOT, run_mutated

pytestmark = [pytest.mark.slow, pytest.mark.notebook]
NOTEBOOK = "solutions/03_feature_maps_and_capacity.ipynb"


def test_keys_that_switch_on_non_neighbours_break_the_one_hot_claim():
    # Switch on r_j and r_{j−2}: DPFP ν = 1 multiplies neighbours only, so every feature of these keys is 0.
    error = run_mutated(NOTEBOOK, "r[j] = r[j - 1] = 1.0", "r[j] = r[j - 2] = 1.0")
    assert error is not None and "ClaimFailed" in error
    assert "the 32 hand-built keys have one-hot features" in error


def test_swapping_favor_for_dpfp_breaks_the_concentration_comparison():
    # A comparative claim across seeds: with DPFP measured in FAVOR+'s row, "FAVOR+ piles its weight on a few keys, more
    # than DPFP" is false in every seed.
    error = run_mutated(
        NOTEBOOK,
        "spec, top3[label], concentration[label], target_weight[label] = capacity.MODELS[label], [], [], []",
        'spec, top3[label], concentration[label], target_weight[label] = capacity.MODELS["DPFP ν=1"], [], [], []',
    )
    assert error is not None and "ClaimFailed" in error
    assert "FAVOR+ piles its weight on a few keys" in error


def test_one_seed_of_the_grid_breaks_the_claims_across_seeds():
    # Another seed set: with the shipped grid read for seed 0 alone, the order of the limits rests on one seed and
    # fails by name instead of reading as a result across seeds.
    error = run_mutated(
        NOTEBOOK,
        'grid_seeds = sorted({r["train_seed"] for r in rows})',
        'grid_seeds = sorted({r["train_seed"] for r in rows})[:1]',
    )
    assert error is not None and "ClaimFailed" in error
    assert "the larger d_dot, the more keys fit" in error and "rests on 1 seed" in error


def test_a_paper_limit_below_ours_breaks_the_comparison():
    # Had the paper solved DPFP ν = 3 only up to 200 of its 384 features, our limits would lie above it in every seed.
    # the run's logged steps are keyed by the same S, so they move with it (the step comparison reads them)
    old_steps, new_steps = (
        '"DPFP ν=3": {340: 6500, 360: 8600, 380: 10200, 400: 6700},',
        '"DPFP ν=3": {200: 6500, 220: 8600, 240: 6700},',
    )
    source = next(c.source for c in nbformat.read(ROOT / NOTEBOOK, as_version=4).cells if old_steps in c.source)
    start = source.index('"DPFP ν=3": {340: 0.0001')
    block = source[start : source.index(old_steps) + len(old_steps)]
    mutated = block.replace(
        '"DPFP ν=3": {340: 0.0001, 360: 0.0034, 380: 0.0045, 400: 0.0359},',
        '"DPFP ν=3": {200: 0.0001, 220: 0.0034, 240: 0.0359},',
    )
    # and the logs below those points end below 200 too, so that the paper's own runs keep no miss below their limit
    below_start = mutated.index('"DPFP ν=3": {20: ')
    below_end = mutated.index("},", below_start) + len("},")
    below = mutated[below_start:below_end]
    kept = ", ".join(
        f"{s}: {loss}" for s, loss in re.findall(r"(\d+): ([0-9.]+)", below.split("{", 1)[1]) if int(s) < 200
    )
    mutated = mutated[:below_start] + '"DPFP ν=3": {' + kept + "}," + mutated[below_end:]
    error = run_mutated(NOTEBOOK, block, mutated.replace(old_steps, new_steps))
    assert error is not None and "ClaimFailed" in error
    assert "no memory's limit lies above the paper's, in any seed" in error


def test_reading_with_the_keys_instead_of_the_queries_breaks_the_mechanism():
    # The model reads with its own query projection. Scored with each key as its own query (the key-key view), a solved
    # run whose keys are not orthogonal no longer gives every query more than 0.9 of its weight on its own key.
    error = run_mutated(NOTEBOOK, "w = readout_weights(queries, after)", "w = readout_weights(after, after)")
    assert error is not None and "ClaimFailed" in error
    assert "a run is solved exactly when every query gives its own key more than 0.9" in error


def test_a_miss_in_the_authors_logs_breaks_the_no_miss_claim():
    # Had the paper's DPFP ν = 2 run at S = 120 failed (a best loss of 0.05), its runs would miss below their limit.
    error = run_mutated(NOTEBOOK, "100: 0.0005, 120: 0.0003, 140: 0.0005", "100: 0.0005, 120: 0.0500, 140: 0.0005")
    assert error is not None and "ClaimFailed" in error
    assert (
        "the paper's runs have no miss below their limits" in error
        and "DPFP ν=2: failed below the limit at [120]" in error
    )
