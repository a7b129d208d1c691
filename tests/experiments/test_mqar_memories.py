"""The MQAR grid of the adaptive-step and deep-memory mixers: its models, a cell, the main grid's recipe, and the
shipped CSV."""

from dataclasses import replace

import pytest
import torch

from ttr_edu.experiments import mqar
from ttr_edu.experiments.mqar_memories import MEMORY_GRID, MemoryGrid, build_model, train_cell
from ttr_edu.tasks.mqar import mqar_batch


@pytest.mark.parametrize("mixer", MEMORY_GRID.mixers)
def test_each_mixer_builds_a_model_that_reads_mqar(mixer):
    model = build_model(mixer, 32, 8)
    batch = mqar_batch(2, 16, 2, 32, generator=torch.Generator().manual_seed(0))
    assert model(batch.inputs).shape == (2, 16, 32)
    assert torch.isfinite(model.loss(batch))


def test_unknown_mixer_is_named():
    with pytest.raises(ValueError, match="mixer: unknown name 'titanic'"):
        build_model("titanic", 32, 8)


def test_the_memories_grid_shares_the_main_grid_recipe():
    course = mqar.COURSE_GRID
    names = (
        "vocab_size",
        "batch_size",
        "max_steps",
        "target_loss",
        "eval_every",
        "eval_examples",
        "test_seed",
        "sweep_on_first_seed",
    )
    assert all(getattr(MEMORY_GRID, name) == getattr(course, name) for name in names)
    assert MEMORY_GRID.random_non_queries and not MEMORY_GRID.sweep_on_first_seed  # every rate with every seed
    assert MEMORY_GRID.tasks == mqar.COURSE_TASKS[:1] and MEMORY_GRID.lrs == mqar.LRS and len(MEMORY_GRID.seeds) >= 3
    assert all(t >= 6 * n for t, n in MEMORY_GRID.tasks)
    with pytest.raises(ValueError, match="seq_len >= 6"):
        MemoryGrid(mixers=("deltanet",), tasks=((32, 8),), d_models=(16,))
    with pytest.raises(ValueError, match="batch_size"):
        MemoryGrid(mixers=("deltanet",), tasks=((64, 8),), d_models=(16,), batch_size=8)


def test_a_cell_trains_reports_its_row_and_leaves_the_callers_threads_alone():
    grid = replace(MEMORY_GRID, max_steps=3, eval_every=3, eval_examples=8, vocab_size=64)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        cell = {"mixer": "longhorn", "seq_len": 24, "num_pairs": 4, "d_model": 8, "lr": 1e-2, "seed": 1}
        row = train_cell(grid, cell)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert row["mixer"] == "longhorn" and row["steps"] == 3 and row["seed"] == 1 and 0.0 <= row["accuracy"] <= 1.0


def test_the_shipped_csv_covers_the_grids_settings():
    """Chapter 09 reads ``ttr_edu/experiments/results/mqar_memories.csv``, the first run of this grid (the rate swept
    on the first seed, and trained before the memory mixers applied SiLU once, as the chapter says): it holds every
    setting of ``MEMORY_GRID`` (mixer, task, width) and no other, each seed's accuracy a fraction."""
    from ttr_edu.experiments.mqar_memories import load_results

    rows = load_results(show=False)
    wanted = {(c["mixer"], c["seq_len"], c["num_pairs"], c["d_model"]) for c in MEMORY_GRID.cells()}
    assert {(r["mixer"], r["seq_len"], r["num_pairs"], r["d_model"]) for r in rows} == wanted
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in rows)
