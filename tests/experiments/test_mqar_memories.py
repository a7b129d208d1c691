"""The small MQAR grid of the adaptive-step and deep-memory mixers builds its models and trains a cell."""

from dataclasses import replace

import pytest
import torch

from ttr_edu.experiments.mqar_memories import MEMORY_GRID, build_model, train_cell
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


def test_a_cell_trains_and_reports_its_row():
    grid = replace(MEMORY_GRID, max_steps=3, eval_every=3, eval_examples=8, batch_size=4)
    row = train_cell(grid, "longhorn", 2, 8, seed=1)
    assert row["mixer"] == "longhorn" and row["steps"] == 3 and row["seed"] == 1 and 0.0 <= row["accuracy"] <= 1.0


def test_the_shipped_csv_is_the_whole_grid_with_its_recipe():
    """Chapter 09 reads ``ttr_edu/experiments/results/mqar_memories.csv``: it must hold every cell of ``MEMORY_GRID``
    once, trained with the grid's recipe (recorded in its header), so that editing the grid without retraining fails
    here."""
    import json
    from importlib import resources

    from ttr_edu.experiments.mqar_memories import load_results

    rows = load_results(show=False)
    cells = sorted((r["mixer"], r["num_pairs"], r["d_model"], r["seed"]) for r in rows)
    assert cells == sorted(MEMORY_GRID.cells())
    assert all(r["seq_len"] == MEMORY_GRID.seq_len and 0.0 <= r["accuracy"] <= 1.0 for r in rows)
    header = resources.files("ttr_edu.experiments").joinpath("results", "mqar_memories.csv").read_text().splitlines()
    recipe = next(line for line in header if line.startswith("# recipe: "))
    assert json.loads(recipe.removeprefix("# recipe: ")) == MEMORY_GRID.recipe()


def test_a_cell_leaves_the_callers_threads_alone_and_bad_jobs_are_named():
    from ttr_edu.experiments.mqar_memories import run_grid

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        train_cell(replace(MEMORY_GRID, max_steps=1, eval_every=1, eval_examples=4, batch_size=2), "deltanet", 2, 8)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ValueError, match=r"^jobs: expected a positive int, got -1"):
        run_grid(MEMORY_GRID, None, jobs=-1)
