"""The capacity/overwrite experiments: the smallest grid point, CSV round trip, the cliff finder, the shipped data,
and the ``python -m ttr_edu.experiments`` dispatcher."""

import importlib

import pytest

from ttr_edu.experiments import __main__ as dispatcher
from ttr_edu.experiments import capacity, overwrite
from ttr_edu.experiments.grid import TrainingSpec, cliff_positions, load_shipped, read_csv, run_point, write_csv

SMALL = TrainingSpec(max_steps=400, eval_every=50)


@pytest.mark.slow
def test_smallest_capacity_point_is_solved():
    row = run_point("capacity", capacity.MODELS["DPFP ν=1"], 4, SMALL)
    assert row["reached_target"] and row["best_eval_loss"] <= 1e-3 and row["steps"] <= 400
    assert row["d_dot"] == 32 and row["keys"] == "trained" and row["train_max_steps"] == 400


@pytest.mark.slow
def test_smallest_overwrite_point_delta_solves_and_sum_does_not():
    delta = run_point("overwrite", overwrite.MODELS["delta, DPFP ν=1"], 4, SMALL)
    summed = run_point("overwrite", overwrite.MODELS["sum, DPFP ν=1"], 4, SMALL)
    assert delta["reached_target"]
    assert not summed["reached_target"] and summed["best_eval_loss"] > 0.05


def test_random_keys_are_only_evaluated():
    spec = capacity.ModelSpec("random", "dpfp", (("nu", 1),), trained_keys=False)
    row = run_point("capacity", spec, 16, SMALL)
    assert row["steps"] == 0 and row["keys"] == "random" and 0 < row["best_eval_loss"] < 0.5


def test_csv_round_trip(tmp_path):
    rows = [{"model": "a", "num_keys": 4, "d_dot": 32, "best_eval_loss": 0.001, "reached_target": True}]
    back = read_csv(write_csv(rows, tmp_path / "grid.csv"))
    assert back == rows


def test_cliff_positions_stop_at_the_first_failure():
    rows = [
        {"model": "m", "num_keys": s, "best_eval_loss": loss}
        for s, loss in [(8, 1e-4), (16, 5e-3), (24, 0.2), (32, 1e-3)]
    ]  # a lucky solve after the cliff
    assert cliff_positions(rows) == {"m": (16, 24)}
    assert cliff_positions(rows[:2]) == {"m": (16, None)}


def test_shipped_capacity_grid_shows_the_cliff_moving_with_d_dot():
    # The CSV holds several seeds (train_seed); cliff_positions reads one run at a time: seed 0, the full grid.
    rows = [
        r
        for r in load_shipped("capacity")
        if r["keys"] == "trained" and r["model"] in capacity.D_DOT and r["train_seed"] == 0
    ]
    cliffs = cliff_positions(rows)
    failures = [cliffs[m][1] for m in ("ELU+1", "DPFP ν=1", "DPFP ν=2", "DPFP ν=3")]
    assert None not in failures and failures == sorted(failures) and len(set(failures)) == 4
    # Random keys degrade smoothly: already imperfect at the smallest S, and worse at the largest.
    random_rows = sorted(
        (r for r in load_shipped("capacity") if r["model"] == "DPFP ν=1 (random keys)" and r["train_seed"] == 0),
        key=lambda r: r["num_keys"],
    )
    assert (
        random_rows[0]["best_eval_loss"] > 1e-2 and random_rows[-1]["best_eval_loss"] > random_rows[0]["best_eval_loss"]
    )


def test_shipped_overwrite_grid_delta_beats_sum():
    rows = [r for r in load_shipped("overwrite") if r["train_seed"] == 0]  # one run: seed 0, the full grid
    cliffs = cliff_positions(rows)
    assert cliffs["sum, DPFP ν=1"][0] is None  # the sum rule never solves it
    assert cliffs["delta, DPFP ν=1"][0] >= 8
    assert cliffs["delta, DPFP ν=2"][1] is None or cliffs["delta, DPFP ν=2"][1] > cliffs["delta, DPFP ν=1"][1]


def test_dispatcher_rejects_unknown_names(capsys):
    assert dispatcher.main(["capcity"]) == 2
    assert "valid names are capacity, overwrite, mqar" in capsys.readouterr().err


def test_dispatcher_explains_a_missing_experiment(monkeypatch, capsys):
    def missing(name):
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    monkeypatch.setattr(importlib, "import_module", missing)
    assert dispatcher.main(["mqar"]) == 1
    assert "mqar.py is missing" in capsys.readouterr().err


def test_unknown_task_and_grid_names():
    with pytest.raises(ValueError, match="valid tasks are capacity, overwrite"):
        run_point("copy", capacity.MODELS["ELU+1"], 4, SMALL)
    with pytest.raises(ValueError, match="valid names are capacity, overwrite"):
        load_shipped("mqar")


def test_loss_figure_says_best_loss_only_for_trained_keys():
    from ttr_edu.experiments.grid import load_shipped, loss_figure

    rows = load_shipped("capacity")
    random_rows = [r for r in rows if r["keys"] == "random"]
    trained_rows = [r for r in rows if r["keys"] == "trained"]
    assert loss_figure(random_rows, title="random").layout.yaxis.title.text == "evaluation loss"
    assert loss_figure(trained_rows, title="trained").layout.yaxis.title.text == "best evaluation loss"


@pytest.mark.parametrize("name", ["mqar", "mqar_memories"])
def test_help_shows_the_docstring_without_sphinx_markup(name, capsys):
    module = importlib.import_module(f"ttr_edu.experiments.{name}")
    assert ":class:`" in module.__doc__ or ":mod:`" in module.__doc__ or ":func:`" in module.__doc__
    with pytest.raises(SystemExit):
        module.main(["--help"])
    out = capsys.readouterr().out
    assert "`" not in out and "MQAR" in out
