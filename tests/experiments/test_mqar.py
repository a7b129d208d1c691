"""The MQAR grids: their design (what each block varies, the tasks, rates and seeds), a CSV that reads back, a
diverging cell kept as a row, Zoology's recipe, the cheapest settings of a grid, and the analysis (best rate by
the mean over seeds, the state frontier)."""

import math
from dataclasses import replace

import pytest
import torch

from ttr_edu.experiments import mqar, mqar_memories
from ttr_edu.experiments.mqar import (
    COURSE_GRID,
    ZOOLOGY_GRID,
    Block,
    Cell,
    MQARGrid,
    ZoologyRecipe,
    load_results,
    run_grid,
    train_or_diverge,
)
from ttr_edu.experiments.mqar_analysis import best, frontier, summarise, table
from ttr_edu.models.mqar import MQARModel
from ttr_edu.tasks.mqar import mqar_batch

TINY = dict(vocab_size=64, batch_size=32, max_steps=20, eval_every=10, eval_examples=16)
#: Adam moves every weight by about the learning rate at each step: at 1e10 the first steps overflow float32
ABSURD = 1e10


def _sample(generator):
    return mqar_batch(32, 24, 4, 64, generator=generator)


def _diverged(row):
    return row["steps"] == 0 and math.isnan(row["final_eval_loss"]) and row["accuracy"] == 0.0


def _settings(cells):
    return {tuple(v for k, v in vars(c).items() if k not in ("lr", "seed")) for c in cells}


# ---- the grids' design ---------------------------------------------------------------------------------------------


def test_the_grids_refuse_cells_without_room_between_queries_and_small_batches():
    with pytest.raises(ValueError, match="seq_len >= 6"):
        MQARGrid("course", blocks=(Block("b", ("deltanet",), (16,), ((64, 16),)),))
    with pytest.raises(ValueError, match="batch_size"):
        MQARGrid("course", blocks=(Block("b", ("deltanet",), (16,), ((96, 16),)),), batch_size=8)
    with pytest.raises(ValueError, match="fillers: expected values from"):
        Block("b", ("deltanet",), (16,), ((96, 16),), fillers=("noise",)).cells()
    with pytest.raises(ValueError, match="models: unknown name 'mamba'"):
        Block("b", ("mamba",), (16,), ((96, 16),)).cells()


@pytest.mark.parametrize("grid", [COURSE_GRID, ZOOLOGY_GRID], ids=["course", "zoology"])
def test_every_setting_is_trained_at_every_rate_with_every_seed(grid):
    """The best rate is chosen by the mean over seeds: every seed must have every rate (no sweep on one seed)."""
    cells = grid.cells()
    assert len(cells) == len(set(cells)) and not grid.sweep_on_first_seed and grid.vocab_size == 8192
    assert all(c.seq_len >= 6 * c.num_pairs for c in cells)
    by_setting = {}
    for c in cells:
        by_setting.setdefault(tuple(v for k, v in vars(c).items() if k not in ("lr", "seed")), set()).add(
            (c.lr, c.seed)
        )
    for pairs in by_setting.values():
        rates, seeds = {lr for lr, _ in pairs}, {s for _, s in pairs}
        assert pairs == {(lr, s) for lr in rates for s in seeds} and len(rates) >= 4 and len(seeds) >= 3


def test_the_course_grid_has_an_informative_state_axis_a_matched_ladder_and_its_arms():
    cells = COURSE_GRID.cells()

    def widths(model, task=(64, 8), **where):
        return {
            c.d_model
            for c in cells
            if (c.model, c.seq_len, c.num_pairs) == (model, *task)
            and c.training == where.get("training", "course")
            and c.filler == where.get("filler", "random")
            and c.short_conv
            and c.n_layers == 1
        }

    assert {8, 12, 16, 23, 32} <= widths("linear_attention") and {8, 12, 16, 23, 32} <= widths("deltanet")
    assert {23, 45} <= widths("linear_attention") & widths("deltanet") and 11 in widths("rls")
    assert {c.lr for c in cells} == {1e-3, 3e-3, 1e-2, 3e-2}
    # RLS keeps 2 d²: d = 11, 16, 32 match the others' d = 16, 23, 45 within 5 %
    for rls, other in ((11, 16), (16, 23), (32, 45)):
        assert rls in widths("rls") and other in widths("deltanet")
        assert abs(2 * rls**2 - other**2) / other**2 < 0.06
    second = (128, 16)
    assert second[0] / second[1] == 64 / 8 and widths("softmax_attention", second) and widths("deltanet", second)
    assert min(widths("softmax_attention")) * 2 * 64 <= max(d * d for d in widths("deltanet"))  # softmax at their state
    assert widths("deltanet", filler="zero") == {16} and widths("rls", training="zoology") == {16}
    no_conv = {(c.model, c.n_layers) for c in cells if not c.short_conv}
    assert {("deltanet", 1), ("softmax_attention", 1), ("softmax_attention", 2)} <= no_conv
    five = {(c.model, c.d_model, c.filler) for c in cells if c.seed == 4}
    assert {
        ("deltanet", 16, "random"),
        ("linear_attention", 16, "random"),
        ("rls", 16, "random"),
        ("deltanet", 16, "zero"),
    } <= five


def test_the_zoology_grid_has_zoologys_and_baseds_tasks_fillers_ladder_and_recipe():
    cells = ZOOLOGY_GRID.cells()
    assert {(c.seq_len, c.num_pairs) for c in cells} == {(64, 4), (128, 8), (256, 16), (256, 32), (512, 64)}
    assert {c.filler for c in cells} == {"random", "zero"} and {c.training for c in cells} == {"zoology"}
    assert {c.d_model for c in cells if c.model == "deltanet"} >= {16, 23, 32, 45, 64, 91, 128, 181, 256}
    assert {c.lr for c in cells} == {1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2}
    assert {"linear_attention", "linear_attention_elu", "deltanet", "rls", "softmax_attention"} <= {
        c.model for c in cells
    }
    assert {c.n_layers for c in cells} == {1, 2} and {c.num_heads for c in cells} == {1, 2}
    soft = {2 * c.seq_len * c.d_model for c in cells if c.model == "softmax_attention" and c.seq_len == 64}
    linear = {c.d_model**2 for c in cells if c.model == "deltanet"}
    assert min(soft) < max(linear) and max(soft) > min(linear)  # softmax's state crosses the ladder
    z = ZOOLOGY_GRID.zoology
    assert (z.batch_size, z.weight_decay, z.stop_accuracy) == (256, 0.1, 0.99) and z.max_steps == 32 * 79


def test_smallest_takes_whole_settings_cheapest_first():
    picked = mqar.smallest(ZOOLOGY_GRID, 40)
    assert len(picked) >= 40 and len(picked) % 18 == 0  # whole settings: 6 rates x 3 seeds
    assert {(c.seq_len, c.num_pairs, c.d_model, c.n_layers) for c in picked} == {(64, 4, 16, 1)}
    cost = max(mqar.cell_cost(ZOOLOGY_GRID, c) for c in picked)
    assert all(mqar.cell_cost(ZOOLOGY_GRID, c) >= cost for c in ZOOLOGY_GRID.cells() if c not in picked)


# ---- training cells ------------------------------------------------------------------------------------------------


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
    grid = MQARGrid("quick", blocks=(Block("b", ("deltanet",), (8,), ((24, 4),), lrs=(1e-2, ABSURD)),), **TINY)
    rows = run_grid(grid, tmp_path / "g.csv", progress=False)
    diverged = [r for r in rows if r["lr"] == ABSURD]
    assert len(diverged) == 3 and all(_diverged(r) for r in diverged)
    assert all(r["steps"] > 0 and math.isfinite(r["final_eval_loss"]) for r in rows if r["lr"] != ABSURD)
    assert best(rows, model="deltanet")["lr"] == 1e-2
    back = load_results(tmp_path / "g.csv", show=False)  # the CSV keeps the NaN loss as it was
    assert [(r["lr"], r["seed"], _diverged(r)) for r in back] == [(r["lr"], r["seed"], _diverged(r)) for r in rows]


def test_zero_filler_and_zoologys_recipe_train_their_cells(tmp_path):
    zoology = ZoologyRecipe(batch_size=32, train_examples=64, epochs=2)
    grid = MQARGrid(
        "quick",
        blocks=(
            Block(
                "b",
                ("deltanet",),
                (8,),
                ((24, 4),),
                lrs=(1e-2,),
                seeds=(0,),
                fillers=("random", "zero"),
                trainings=("course", "zoology"),
            ),
        ),
        zoology=zoology,
        **TINY,
    )
    rows = {(r["filler"], r["training"]): r for r in run_grid(grid, progress=False)}
    assert rows["zero", "zoology"]["steps"] == 4 and rows["zero", "zoology"]["batch_size"] == 32  # 2 epochs of 2
    assert rows["random", "course"]["steps"] == 20
    zero = mqar.held_out(grid, Cell("deltanet", "silu", True, 1, 1, "zero", "course", 24, 4, 8, 1e-2, 0))
    labelled = zero.labels != -100
    assert (zero.inputs[:, 8:][~labelled[:, 8:]] == 0).all()  # zero filler: every non-query slot is token 0


def test_zoologys_recipe_decays_the_rate_per_epoch_and_stops_early(monkeypatch):
    """AdamW with weight decay, the cosine schedule stepped once per epoch, and the stop after an epoch whose
    validation accuracy exceeds the threshold."""
    seen = []
    real = torch.optim.AdamW

    class Recording(real):
        def step(self, *args, **kwargs):
            seen.append((self.param_groups[0]["lr"], self.param_groups[0]["weight_decay"]))
            return super().step(*args, **kwargs)

    monkeypatch.setattr(torch.optim, "AdamW", Recording)
    data = mqar_batch(64, 24, 4, 64, generator=torch.Generator().manual_seed(0))
    recipe = ZoologyRecipe(batch_size=32, train_examples=64, epochs=4, stop_accuracy=1.1)  # never stops early
    torch.manual_seed(0)
    steps, loss = mqar.train_zoology(MQARModel("deltanet", 64, 8), data, data, recipe, 0.01, 0)
    assert steps == 8 and math.isfinite(loss) and {wd for _, wd in seen} == {0.1}
    per_epoch = [seen[i][0] for i in range(0, 8, 2)]
    assert per_epoch == pytest.approx([0.01 * (1 + math.cos(math.pi * e / 4)) / 2 for e in range(4)])
    seen.clear()
    stop_at_once = replace(recipe, stop_accuracy=-1.0)
    assert mqar.train_zoology(MQARModel("deltanet", 64, 8), data, data, stop_at_once, 0.01, 0)[0] == 2


@pytest.mark.slow  # the first Adam in a process imports torch._dynamo (~10 s here); the run itself is 2 steps
def test_grid_writes_a_csv_that_reads_back_with_its_provenance(tmp_path, capsys):
    grid = MQARGrid(
        "quick",
        blocks=(Block("b", ("softmax_attention",), (8,), ((24, 4),), lrs=(1e-2,), seeds=(0,)),),
        **dict(TINY, max_steps=2, eval_every=1),
    )
    rows = run_grid(grid, tmp_path / "g.csv", command="the command", progress=False)
    back = load_results(tmp_path / "g.csv")
    shown = capsys.readouterr().out
    assert "command: the command" in shown and "git commit:" in shown and "cpu:" in shown and "torch:" in shown
    assert back == rows and back[0]["steps"] <= 2 and back[0]["state_size"] == 2 * 24 * 8
    assert summarise(back, model="softmax_attention")["n"] == 1


def test_the_memories_grid_keeps_a_diverged_cell_too():
    grid = replace(mqar_memories.MEMORY_GRID, max_steps=5, eval_every=5, eval_examples=8, vocab_size=64)
    cell = {"mixer": "deltanet", "seq_len": 24, "num_pairs": 4, "d_model": 8, "lr": ABSURD, "seed": 0}
    row = mqar_memories.train_cell(grid, cell)
    assert _diverged(row) and row["mixer"] == "deltanet" and row["state_size"] == 64


# ---- reading a grid ------------------------------------------------------------------------------------------------


def _row(model="m", lr=1e-2, seed=0, acc=0.5, loss=1.0, **more):
    return {"model": model, "lr": lr, "seed": seed, "accuracy": acc, "final_eval_loss": loss, **more}


def test_a_diverged_rate_never_wins_a_tie():
    # both rates recall nothing: the tie goes to the lower loss, and a NaN loss is no loss at all
    assert mqar.choose_lr([_row(lr=1e-4, acc=0.0, loss=math.nan), _row(lr=1e-2, acc=0.0, loss=8.9)]) == 1e-2
    assert mqar.choose_lr([_row(lr=1e-4, acc=0.0, loss=8.9), _row(lr=1e-2, acc=0.0, loss=math.nan)]) == 1e-4


def test_best_picks_the_rate_by_the_mean_over_the_seeds():
    rows = [
        _row(lr=1e-3, seed=0, acc=0.9),
        _row(lr=1e-3, seed=1, acc=0.1),
        _row(lr=1e-2, seed=0, acc=0.6),
        _row(lr=1e-2, seed=1, acc=0.6),
    ]
    chosen = best(rows, model="m")
    assert chosen["lr"] == 1e-2 and chosen["min"] == 0.6 and chosen["by_lr"] == {1e-3: 0.5, 1e-2: 0.6}
    tie = [_row(lr=1e-3, acc=1.0, loss=0.01), _row(lr=1e-2, acc=1.0, loss=0.002)]
    assert best(tie, model="m")["lr"] == 1e-2  # equal accuracy: the lower loss wins


def _grid_rows(model, s50, slope, states, seeds=5, noise=0.0, rng=None):
    """Rows of a made-up layer on the baseline setting whose accuracy follows the logistic frontier exactly (plus
    seed noise)."""
    out = []
    for d, state in enumerate(states, start=4):
        for seed in range(seeds):
            p = 1 / (1 + math.exp(-slope * (math.log2(state) - math.log2(s50))))
            p = min(max(p + (rng.uniform(-noise, noise) if rng else 0.0), 0.0), 1.0)
            out.append(
                {
                    "model": model,
                    "feature_map": "silu" if model != "softmax_attention" else "",
                    "short_conv": True,
                    "n_layers": 1,
                    "num_heads": 1,
                    "filler": "random",
                    "training": "course",
                    "seq_len": 64,
                    "num_pairs": 8,
                    "d_model": d,
                    "lr": 1e-2,
                    "seed": seed,
                    "accuracy": p,
                    "final_eval_loss": 1.0,
                    "state_size": state,
                }
            )
    return out


def test_the_frontier_fit_recovers_a_known_offset_and_slope_and_its_interval_covers_them():
    import random

    rows = _grid_rows("deltanet", 400.0, 2.0, [128, 256, 512, 1024, 2048], noise=0.05, rng=random.Random(1))
    rows += _grid_rows("rls", 800.0, 2.0, [128, 256, 512, 1024, 2048])
    fit = frontier(rows, ["deltanet", "rls"], boot=200)
    assert fit["rls"]["s50"] == pytest.approx(800.0, rel=1e-6) and fit["rls"]["slope"] == pytest.approx(2.0, rel=1e-6)
    low, high = fit["deltanet"]["s50_interval"]
    assert low < 400.0 < high and high / low < 2 and fit["deltanet"]["inside"]
    assert fit["rls"]["s50_interval"][0] > high  # twice the state: the intervals separate
    with pytest.raises(ValueError, match="need 2"):
        frontier(rows[:5], ["deltanet"])


def test_the_table_lists_each_setting_with_its_change_from_the_baseline():
    rows = _grid_rows("deltanet", 400.0, 2.0, [256, 512]) + [
        dict(r, filler="zero") for r in _grid_rows("deltanet", 400.0, 2.0, [256])
    ]
    lines = table(rows).splitlines()
    assert len(lines) == 2 + 3 and lines[-1].rstrip().endswith("filler zero") and "(5)" in lines[2]


def test_the_detectable_difference_of_five_seeds_a_side_is_about_two_standard_deviations():
    from ttr_edu.experiments.mqar_analysis import detectable_difference

    a, b = [0.50, 0.52, 0.48, 0.51, 0.49], [0.60, 0.62, 0.58, 0.61, 0.59]  # sample sd 0.0158 on each side
    sd = (sum((x - 0.5) ** 2 for x in a) / 4) ** 0.5
    # t_{0.975, 8} = 2.306, t_{0.8, 8} = 0.889: (2.306 + 0.889) sqrt(2/5) sd = 2.02 sd
    assert detectable_difference(a, b) == pytest.approx(3.195 * (2 / 5) ** 0.5 * sd, rel=1e-3)
    assert detectable_difference(a * 4, b * 4) < detectable_difference(a, b)  # more seeds, smaller
    with pytest.raises(ValueError, match="at least two"):
        detectable_difference([0.5], b)


def test_the_cluster_guide_states_the_grids_as_the_code_defines_them():
    """docs/cluster.md gives the Zoology grid's size, step budget and recipe; they must be the code's."""
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "cluster.md").read_text().split())
    z = ZOOLOGY_GRID.zoology
    assert f"**{len(ZOOLOGY_GRID.cells()):,} trained models**" in text
    assert f"({z.epochs} epochs of {math.ceil(z.train_examples / z.batch_size)} batches: {z.max_steps:,} steps" in text
    assert f"over {z.epochs} epochs of a fixed set of {z.train_examples:,} examples" in text
    assert "d = " + ", ".join(map(str, mqar.LADDER)) in text
    assert f"the course grid of MQAR ({len(COURSE_GRID.cells())} cells)" in text
    assert "--grid full" not in text and "1,344" not in text
