"""The shared runner: rows land as cells finish, under their provenance; resume never mixes recipes and repairs or
refuses a damaged CSV; a Dask LocalCluster gives the local rows bit for bit; a dead worker loses only its cell."""

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from tests.helpers import start_as_in_a_terminal
from ttr_edu.experiments import runner

TOY = runner.Experiment(
    name="toy",
    fields=("name", "x", "square", "seconds"),
    key=("name", "x"),
    types={"x": int, "square": float, "seconds": float},
    timing=("seconds",),
)
RECIPE = {"power": 2, "nested": {"a": 1}}
CELLS = [{"name": n, "x": x} for n in ("a", "b") for x in (1, 2, 3)]


def toy_cell(cell: dict, die_on: str | None = None, flag: str | None = None) -> dict:
    """A cell that squares ``x``; with ``die_on`` and an existing ``flag`` file, the process running cell ``die_on``
    (at x = 2) exits at once, as a worker killed by the system would."""
    if die_on is not None and cell["name"] == die_on and cell["x"] == 2 and flag and os.path.exists(flag):
        os._exit(1)
    return {"name": cell["name"], "x": cell["x"], "square": float(cell["x"] ** RECIPE["power"]) / 3, "seconds": 0.0}


def timeless(rows, experiment=TOY):
    return [{k: v for k, v in r.items() if k not in experiment.timing} for r in rows]


def test_rows_land_under_their_provenance_and_read_back(tmp_path):
    out = tmp_path / "g.csv"
    result = runner.run(TOY, RECIPE, CELLS, toy_cell, out, command="the command", note=lambda m: None)
    assert result.trained == 6 and not result.lost
    meta, rows = runner.read(TOY, out)
    assert rows == result.rows and [r["x"] for r in rows] == [1, 2, 3, 1, 2, 3]
    assert meta["command"] == "the command" and meta["recipe"] == RECIPE and meta["experiment"] == "toy"
    assert meta["ttr-edu"] == runner.package_version() and "git commit" in meta
    assert {r["recipe"] for r in rows} == {runner.recipe_hash(RECIPE)} == {meta["recipe hash"]}
    assert rows[1]["square"] == 4 / 3  # floats are written in full: the CSV holds the computed value exactly
    assert out.read_text().splitlines()[-1].startswith("# finished:")


def test_resume_runs_only_the_missing_cells(tmp_path):
    out = tmp_path / "g.csv"
    runner.run(TOY, RECIPE, CELLS[:4], toy_cell, out)
    calls = []

    def counting(cell):
        calls.append(cell["x"])
        return toy_cell(cell)

    result = runner.run(TOY, RECIPE, CELLS, counting, out, resume=True)
    assert result.trained == 2 and sorted(calls) == [2, 3] and len(runner.read(TOY, out)[1]) == 6
    assert "# resumed:" in out.read_text()


def test_resume_refuses_another_recipe_and_names_the_difference(tmp_path):
    out = tmp_path / "g.csv"
    runner.run(TOY, RECIPE, CELLS[:2], toy_cell, out)
    other = {"power": 3, "nested": {"a": 2}}
    with pytest.raises(runner.ResumeRefused, match=r"another recipe \(nested\.a: 1 there, 2 here; power: 2 there, 3"):
        runner.run(TOY, other, CELLS, toy_cell, out, resume=True)
    assert len(runner.read(TOY, out)[1]) == 2  # untouched


def test_resume_refuses_rows_of_another_recipe_under_the_header(tmp_path):
    out = tmp_path / "g.csv"
    runner.run(TOY, RECIPE, CELLS[:2], toy_cell, out)
    text = out.read_text().replace(runner.recipe_hash(RECIPE) + ",", "000000000000,", 1)
    out.write_text(text.replace("# recipe hash: 000000000000", f"# recipe hash: {runner.recipe_hash(RECIPE)}"))
    with pytest.raises(runner.ResumeRefused, match="holds a row of recipe 000000000000"):
        runner.run(TOY, RECIPE, CELLS, toy_cell, out, resume=True)


def test_resume_refuses_a_file_that_is_not_a_grid_csv(tmp_path):
    out = tmp_path / "g.csv"
    out.write_text("hello,world\n1,2\n")
    with pytest.raises(runner.ResumeRefused, match="not a CSV of the toy grid: its columns are hello, world"):
        runner.run(TOY, RECIPE, CELLS, toy_cell, out, resume=True)
    out.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(runner.ResumeRefused, match="not a text file"):
        runner.run(TOY, RECIPE, CELLS, toy_cell, out, resume=True)
    out.write_text("name,x,square,seconds\n")  # a CSV of this experiment from before the runner: no recipe
    with pytest.raises(runner.ResumeRefused, match="not a CSV of the toy grid"):
        runner.run(TOY, RECIPE, CELLS, toy_cell, out, resume=True)


def test_a_cut_last_row_is_dropped_and_trained_again(tmp_path):
    """Reproducers mqar_resume_corrupt_csv_traceback (a cut row) and mqar_resume_appends_to_unterminated_line."""
    out = tmp_path / "g.csv"
    runner.run(TOY, RECIPE, CELLS[:3], toy_cell, out)
    lines = out.read_text().splitlines()
    rows_end = [i for i, line in enumerate(lines) if not line.startswith("#")][-1]
    cut = "\n".join(lines[: rows_end + 1])[:-9]  # the last row loses its end, and the file its final newline
    out.write_text(cut)
    notes = []
    result = runner.run(TOY, RECIPE, CELLS, toy_cell, out, resume=True, note=notes.append)
    assert result.trained == 4 and "dropped it" in notes[0]
    meta, rows = runner.read(TOY, out)
    assert timeless(rows) == timeless(runner.run(TOY, RECIPE, CELLS, toy_cell).rows)
    assert all(line.count("#") <= 1 for line in out.read_text().splitlines())  # nothing glued onto a line


def test_a_whole_last_line_without_its_newline_is_completed(tmp_path):
    out = tmp_path / "g.csv"
    runner.run(TOY, RECIPE, CELLS[:3], toy_cell, out)
    out.write_text(out.read_text().rstrip("\n"))  # ends in '# finished: ...' without a newline
    notes = []
    runner.run(TOY, RECIPE, CELLS, toy_cell, out, resume=True, note=notes.append)
    assert "added one" in notes[0]
    assert [line for line in out.read_text().splitlines() if line.startswith("# resumed")]
    assert not [line for line in out.read_text().splitlines() if "# finished" in line and "# resumed" in line]


def test_a_damaged_row_inside_the_file_is_refused_with_its_line(tmp_path):
    out = tmp_path / "g.csv"
    runner.run(TOY, RECIPE, CELLS[:3], toy_cell, out)
    lines = out.read_text().splitlines()
    first_row = [i for i, line in enumerate(lines) if not line.startswith("#")][1]
    lines[first_row] = "a,one,1.0,0.0," + lines[first_row].split(",", 4)[-1]
    out.write_text("\n".join(lines) + "\n")
    with pytest.raises(runner.ResumeRefused, match=rf"line {first_row + 1}: not a row of the toy grid \(column x"):
        runner.run(TOY, RECIPE, CELLS, toy_cell, out, resume=True)


@pytest.mark.slow  # two worker processes import torch
def test_joblib_workers_give_the_rows_of_a_serial_run(tmp_path):
    serial = runner.run(TOY, RECIPE, CELLS, toy_cell).rows
    parallel = runner.run(TOY, RECIPE, CELLS, toy_cell, tmp_path / "g.csv", jobs=2).rows
    written = runner.read(TOY, tmp_path / "g.csv")[1]  # in the order the cells finished, which varies
    assert parallel == serial and sorted(written, key=TOY.cell_of) == sorted(serial, key=TOY.cell_of)


def test_bad_jobs_and_scheduler_are_named():
    with pytest.raises(ValueError, match="jobs: expected a positive int, got 0"):
        runner.run(TOY, RECIPE, CELLS, toy_cell, jobs=0)
    with pytest.raises(ValueError, match="scheduler: expected local:N"):
        runner.run(TOY, RECIPE, CELLS, toy_cell, scheduler="local:0")


def test_interrupted_run_keeps_a_valid_csv(tmp_path):
    out = tmp_path / "g.csv"

    def interrupted(cell):
        if cell["x"] == 3:
            raise KeyboardInterrupt
        return toy_cell(cell)

    with pytest.raises(KeyboardInterrupt):
        runner.run(TOY, RECIPE, CELLS, interrupted, out)
    assert out.read_text().splitlines()[-1].startswith("# interrupted:")
    assert len(runner.read(TOY, out)[1]) == 2
    result = runner.run(TOY, RECIPE, CELLS, toy_cell, out, resume=True)
    assert result.trained == 4 and len(runner.read(TOY, out)[1]) == 6


# ---- Dask ------------------------------------------------------------------------------------------------------------

if os.environ.get("CI"):  # the dev extra installs dask[distributed]: in CI these tests must run, never skip
    import distributed  # noqa: F401
else:
    pytest.importorskip("distributed", reason="the cluster extra (dask[distributed]) is part of dev")


@pytest.mark.slow  # a LocalCluster of two worker processes starts in a few seconds
def test_a_dask_local_cluster_gives_the_local_rows_bit_for_bit(tmp_path):
    """A tiny MQAR grid through a LocalCluster of 2 worker processes: every row equals the local run's, float for
    float, but for the two times."""
    from ttr_edu.experiments import mqar

    tiny = mqar.MQARGrid(
        name="quick",
        blocks=(mqar.Block("b", ("deltanet", "softmax_attention"), (8,), ((24, 4),), lrs=(1e-2,), seeds=(0, 1)),),
        vocab_size=64,
        max_steps=3,
        eval_every=3,
        eval_examples=16,
    )
    local = mqar.run_grid(tiny, tmp_path / "local.csv", progress=False)
    dask = mqar.run_grid(tiny, tmp_path / "dask.csv", scheduler="local:2", progress=False)
    assert len(local) == 4
    assert timeless(dask, mqar.EXPERIMENT) == timeless(local, mqar.EXPERIMENT)
    written = sorted(mqar.load_results(tmp_path / "dask.csv", show=False), key=mqar.EXPERIMENT.cell_of)
    assert timeless(written, mqar.EXPERIMENT) == timeless(sorted(local, key=mqar.EXPERIMENT.cell_of), mqar.EXPERIMENT)


@pytest.mark.slow
def test_a_dead_worker_loses_only_its_cell_and_resume_redoes_it(tmp_path):
    import dask

    flag = tmp_path / "die"
    flag.write_text("")
    out = tmp_path / "g.csv"
    # a cell that kills its worker is retried on another worker allowed-failures times; 0 makes it lost at once
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        result = runner.run(TOY, RECIPE, CELLS, partial(toy_cell, die_on="b", flag=str(flag)), out, scheduler="local:2")
    assert result.lost == [{"name": "b", "x": 2}] and result.trained == 5
    assert sorted(TOY.cell_of(r) for r in runner.read(TOY, out)[1]) == sorted(
        TOY.cell_of(c) for c in CELLS if c != {"name": "b", "x": 2}
    )
    assert "1 lost (a worker died)" in out.read_text()
    flag.unlink()
    again = runner.run(TOY, RECIPE, CELLS, partial(toy_cell, die_on="b", flag=str(flag)), out, resume=True)
    assert again.trained == 1 and timeless(again.rows) == timeless(runner.run(TOY, RECIPE, CELLS, toy_cell).rows)


# ---- the command lines -----------------------------------------------------------------------------------------------


def cli(*args, cwd):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "ttr_edu.experiments", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@pytest.mark.slow  # each call starts a Python that imports torch
@pytest.mark.parametrize(
    "args, message",
    [
        (["mqar_memories", "--jobs", "0", "--out", "m.csv"], "--jobs: expected 1 to"),
        (["mqar", "--jobs", "100000", "--out", "m.csv"], "--jobs: expected 1 to"),
        (["capacity", "--quick", "--max-steps", "1", "--out", "adir"], "--out: adir is a folder"),
        (["mqar", "--quick", "--max-steps", "0", "--out", "m0.csv"], "--max-steps: expected a positive int"),
        (["mqar", "--quick", "--out", "nodir/x.csv"], "--out: the folder nodir does not exist"),
        (["lm", "--scheduler", "local:0"], "--scheduler: local:N needs N from 1"),
        (["mqar", "--scheduler", "http://x", "--quick"], "--scheduler: expected local:N or tcp://HOST:PORT"),
        (["mqar_memories", "--seeds", "-1"], "--seeds: expected ints >= 0"),
        (["overwrite", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_argument_errors_are_one_line_and_exit_2(tmp_path, args, message):
    """Reproducer experiments_bad_jobs_and_out, and the other argument errors: one line, exit 2, no CSV written."""
    (tmp_path / "adir").mkdir()
    p = cli(*args, cwd=tmp_path)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and message in p.stderr, p.stderr
    assert not list(tmp_path.glob("*.csv"))


@pytest.mark.slow
def test_resume_with_another_max_steps_is_refused_on_the_command_line(tmp_path):
    """Reproducer mqar_resume_mixes_recipes: ``--resume --max-steps 3`` on a CSV written with ``--max-steps 2`` used to
    train the missing cells with 3 steps under a header saying 2."""
    from dataclasses import asdict, replace

    from ttr_edu.experiments import mqar

    grid = replace(mqar.QUICK_GRID, max_steps=2)
    cells = [asdict(c) for c in grid.cells()]

    def fake(cell):  # a row without training: only the recipe in the header matters here
        fields = {k: 0 for k in mqar.EXPERIMENT.fields}
        return {**fields, **cell, "final_eval_loss": 1.0, "accuracy": 0.5}

    runner.run(mqar.EXPERIMENT, grid.recipe(), cells[:1], fake, tmp_path / "g.csv")
    before = (tmp_path / "g.csv").read_text()
    p = cli("mqar", "--quick", "--max-steps", "3", "--out", "g.csv", "--resume", cwd=tmp_path)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "another recipe (max_steps: 2 there, 3 here)" in p.stderr
    assert (tmp_path / "g.csv").read_text() == before


@pytest.mark.slow
def test_resume_refusal_on_the_command_line_is_one_line(tmp_path):
    """Reproducer mqar_resume_corrupt_csv_traceback: a CSV that is not a grid CSV ended in a KeyError traceback."""
    (tmp_path / "g.csv").write_text("hello,world\n1,2\n")
    p = cli("mqar", "--quick", "--max-steps", "1", "--out", "g.csv", "--resume", cwd=tmp_path)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "not a CSV of the mqar grid" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.slow
def test_ctrl_c_is_one_line_exit_130_and_the_csv_stays_valid(tmp_path):
    import signal
    import time

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    process = start_as_in_a_terminal(
        [
            sys.executable,
            "-W",
            "ignore",
            "-m",
            "ttr_edu.experiments",
            "mqar",
            "--quick",
            "--jobs",
            "2",
            "--out",
            "g.csv",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not (tmp_path / "g.csv").exists():
        time.sleep(0.2)
    time.sleep(3)
    os.killpg(process.pid, signal.SIGINT)  # as a terminal's Ctrl-C does: the whole process group
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert stderr.strip().splitlines() == ["interrupted: the rows written so far are kept; --resume runs the rest"]
    from ttr_edu.experiments import mqar

    meta, rows = runner.read(mqar.EXPERIMENT, tmp_path / "g.csv")
    assert json.dumps(meta["recipe"]) and all(r["recipe"] == meta["recipe hash"] for r in rows)
