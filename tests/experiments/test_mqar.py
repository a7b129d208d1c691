"""A diverging MQAR cell is a result of its learning rate, not a crash of the grid: it is kept as a row (steps 0, loss
NaN, accuracy 0), and the grid goes on with the other rates and seeds (``train_or_diverge``)."""

import math
from dataclasses import replace

import torch

from ttr_edu.experiments import mqar, mqar_memories
from ttr_edu.experiments.mqar import Block, MQARGrid, best, run_grid, train_or_diverge
from ttr_edu.models.mqar import MQARModel
from ttr_edu.tasks.mqar import mqar_batch

TINY = dict(vocab_size=64, batch_size=32, max_steps=20, eval_every=10, eval_examples=16)
#: Adam moves every weight by about the learning rate at each step: at 1e10 the first steps overflow float32
ABSURD = 1e10


def _sample(generator):
    return mqar_batch(32, 24, 4, 64, generator=generator)


def _diverged(row):
    return row["steps"] == 0 and math.isnan(row["final_eval_loss"]) and row["accuracy"] == 0.0


def test_an_absurd_learning_rate_gives_the_diverged_result_and_a_sane_one_trains():
    test = mqar_batch(16, 24, 4, 64, generator=torch.Generator().manual_seed(1))
    options = dict(max_steps=20, eval_every=10, eval_batches=1, seed=0, progress=False)
    torch.manual_seed(0)
    steps, loss, accuracy = train_or_diverge(MQARModel("deltanet", 64, 8), _sample, test, lr=ABSURD, **options)
    assert steps == 0 and math.isnan(loss) and accuracy == 0.0
    torch.manual_seed(0)
    steps, loss, accuracy = train_or_diverge(MQARModel("deltanet", 64, 8), _sample, test, lr=1e-2, **options)
    assert steps == 20 and math.isfinite(loss) and 0.0 <= accuracy <= 1.0


def test_the_grid_keeps_the_diverged_cell_as_a_row_and_goes_on(tmp_path):
    grid = MQARGrid(
        "quick", blocks=(Block("b", ("deltanet",), (8,), ((24, 4),), lrs=(1e-2, ABSURD), seeds=(0, 1, 2)),), **TINY
    )
    rows = run_grid(grid, tmp_path / "g.csv", progress=False)
    diverged = [r for r in rows if r["lr"] == ABSURD]
    assert len(diverged) == 1 and _diverged(diverged[0]) and diverged[0]["seed"] == 0
    trained = [r for r in rows if r["lr"] != ABSURD]
    assert sorted(r["seed"] for r in trained) == [0, 1, 2]  # the sweep went on: the other seeds at the sane rate
    assert all(r["steps"] > 0 and math.isfinite(r["final_eval_loss"]) for r in trained)
    assert best(rows, model="deltanet")["lr"] == 1e-2
    back = mqar.load_results(tmp_path / "g.csv", show=False)  # the CSV keeps the NaN loss as it was
    assert [(r["lr"], r["seed"], _diverged(r)) for r in back] == [(r["lr"], r["seed"], _diverged(r)) for r in rows]


def test_the_memories_grid_keeps_a_diverged_cell_too():
    grid = replace(mqar_memories.MEMORY_GRID, max_steps=5, eval_every=5, eval_examples=8, vocab_size=64)
    cell = {"mixer": "deltanet", "seq_len": 24, "num_pairs": 4, "d_model": 8, "lr": ABSURD, "seed": 0}
    row = mqar_memories.train_cell(grid, cell)
    assert _diverged(row) and row["mixer"] == "deltanet" and row["state_size"] == 64


def test_a_diverged_rate_never_wins_a_tie():
    def row(lr, acc, loss):
        return {"model": "m", "lr": lr, "seed": 0, "accuracy": acc, "final_eval_loss": loss}

    # both rates recall nothing: the tie goes to the lower loss, and a NaN loss is no loss at all
    assert mqar.choose_lr([row(1e-4, 0.0, math.nan), row(1e-2, 0.0, 8.9)]) == 1e-2
    assert mqar.choose_lr([row(1e-4, 0.0, 8.9), row(1e-2, 0.0, math.nan)]) == 1e-4
