"""Every shipped MQAR CSV says how to reproduce it (a commit of this repository and the command), holds exactly the
cells its grid asks for with the grid's recipe, and chapter 09 takes its numbers from these files and no other."""

import ast
import json
import shlex
import subprocess
from dataclasses import asdict
from importlib import resources
from pathlib import Path

import nbformat
import pytest

from ttr_edu.experiments import mqar, mqar_memories, provenance, runner

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = {
    "mqar_grid.csv": (mqar.EXPERIMENT, mqar.COURSE_GRID.recipe(), "mqar"),
    "mqar_memories.csv": (mqar_memories.EXPERIMENT, mqar_memories.MEMORY_GRID.recipe(), "mqar_memories"),
}


def shipped(name):
    text = resources.files("ttr_edu.experiments").joinpath("results", name).read_text()
    experiment, _, _ = SHIPPED[name]
    return runner.read(experiment, name, text=text)


@pytest.mark.parametrize("name", list(SHIPPED))
def test_the_header_names_the_command_the_version_the_recipe_the_code_and_the_machine(name):
    meta, rows = shipped(name)
    experiment, recipe, prog = SHIPPED[name]
    code_line = meta["training code"]
    digest, code = code_line.split(" ", 1)[0], json.loads(code_line.split(" ", 1)[1])
    assert meta["experiment"] == prog and meta["recipe"] == recipe and provenance.code_digest(code) == digest
    assert meta["recipe hash"] == runner.recipe_hash(recipe, code)  # the hash covers the recipe and the code
    assert {r["recipe"] for r in rows} == {meta["recipe hash"]} and {r["version"] for r in rows} == {meta["ttr-edu"]}
    assert all(meta[k] for k in ("torch", "blas", "python", "cpu"))
    assert "ttr_edu/train.py" in code and "ttr_edu/tasks/mqar.py" in code and "ttr_edu/models/mqar.py" in code
    command = shlex.split(meta["command"])
    assert command[:4] == ["python", "-m", "ttr_edu.experiments", prog]
    assert not {"--max-steps", "--seeds", "--quick", "--smallest"} & set(command)
    assert "--grid" not in command or command[command.index("--grid") + 1] == "course"
    assert meta["git commit"] != "unknown" and "uncommitted" not in meta["git commit"]
    comments = _comments(name)
    assert comments[-1].startswith("finished:"), "a shipped grid ends with the closing line of a complete run"


@pytest.mark.parametrize("name", list(SHIPPED))
def test_every_resume_names_a_commit_of_this_repository(name):
    """A resumed run (``--resume``) appends rows of the same recipe (the runner refuses another) and records the
    commit it ran at; that commit must exist here too, so both parts of the file can be checked out."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for line in _comments(name):
        if line.startswith("resumed:"):
            commit = line.split(" at git commit ")[1].split()[0]
            found = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True)
            assert found.returncode == 0, f"{name}: {line!r} names a commit this repository does not have"


def _comments(name):
    text = resources.files("ttr_edu.experiments").joinpath("results", name).read_text()
    return [line[2:] for line in text.splitlines() if line.startswith("# ")]


@pytest.mark.parametrize("name", list(SHIPPED))
def test_the_commit_exists_in_this_repository(name):
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    commit = shipped(name)[0]["git commit"]
    found = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True)
    assert found.returncode == 0, f"{name} names commit {commit}, which this repository does not have"


def test_the_course_csv_holds_exactly_the_cells_of_the_course_grid():
    _, rows = shipped("mqar_grid.csv")
    wanted = [asdict(c) for c in mqar.COURSE_GRID.cells()]
    assert sorted(mqar.EXPERIMENT.cell_of(c) for c in wanted) == sorted(mqar.EXPERIMENT.cell_of(r) for r in rows)
    assert all(r["vocab_size"] == 8192 for r in rows)
    assert all(r["steps"] <= mqar.COURSE_GRID.max_steps for r in rows if r["training"] == "course")
    assert all(r["steps"] <= mqar.COURSE_GRID.zoology.max_steps for r in rows if r["training"] == "zoology")


def test_chapter_09_reads_its_numbers_from_the_shipped_csvs_only():
    """Every grid number of chapter 09 comes from ``load_results()`` of the two shipped CSVs: the notebook calls
    both without a path, opens no other file, and trains no grid of its own."""
    nb = nbformat.read(ROOT / "solutions" / "09_associative_recall.ipynb", 4)
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    calls = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)]
    names = [ast.unparse(node.func) for node in calls]
    loads = [node for node, name in zip(calls, names) if name.endswith("load_results")]
    assert sorted(ast.unparse(node.func) for node in loads) == ["load_results", "mqar_memories.load_results"]
    assert all(not node.args and not node.keywords for node in loads), "the chapter reads the shipped CSVs"
    assert not any(name in ("open", "Path", "run_grid") or name.endswith(("read_csv", "run_grid")) for name in names)
    assert json.dumps(mqar.COURSE_GRID.recipe()) in "\n".join(f"# {line}" for line in _comments("mqar_grid.csv"))


def _queries(row):
    """The queries the held-out set asks: ``eval_examples`` examples of ``num_pairs`` queries each."""
    return mqar.COURSE_GRID.eval_examples * row["num_pairs"]


@pytest.mark.slow  # four cells of the course grid, retrained (a minute or two)
@pytest.mark.parametrize("model", ["linear_attention", "deltanet", "rls", "softmax_attention"])
def test_a_retrained_cell_of_each_layer_matches_the_csv(model):
    """The cheapest cell of each layer, retrained here, against its row in the shipped CSV.

    On the machine and code that wrote the CSV a retrain is bit for bit the same. Elsewhere the CPU's kernels round
    differently and training drifts, so the test allows what an *independent* model of the same recall would differ
    by on the same ``M`` held-out queries: two binomial proportions at the CSV's accuracy ``p`` differ with standard
    deviation ``sqrt(2 p (1 - p) / M)``; the tolerance is three of them, plus one query (``1/M``) so that a model at
    ``p = 0`` or ``1`` may still miss one. A retrain from the same seed, data and code is closer than that. The
    early stop is checked every ``eval_every`` steps, so the steps agree exactly when the run used its whole budget
    and within one check otherwise."""
    _, rows = shipped("mqar_grid.csv")
    baseline = [
        r
        for r in rows
        if r["model"] == model
        and r["short_conv"]
        and r["n_layers"] == 1
        and r["filler"] == "random"
        and r["training"] == "course"
        and r["seq_len"] == 64
        and r["seed"] == 0
    ]
    row = min(baseline, key=lambda r: (r["d_model"], r["lr"]))
    cell = {k: row[k] for k in mqar.EXPERIMENT.key}
    again = mqar.train_cell(mqar.COURSE_GRID, cell)
    p, m = row["accuracy"], _queries(row)
    tolerance = 3 * (2 * p * (1 - p) / m) ** 0.5 + 1 / m
    assert abs(again["accuracy"] - p) <= tolerance, (cell, again["accuracy"], p, tolerance)
    if row["steps"] in (0, mqar.COURSE_GRID.max_steps):  # a diverged run, or the whole budget
        assert again["steps"] == row["steps"]
    else:
        assert abs(again["steps"] - row["steps"]) <= mqar.COURSE_GRID.eval_every


def test_the_zoology_proof_run_holds_the_grids_cheapest_settings_trained_on_a_local_dask_cluster():
    """``mqar_zoology_smallest.csv``: at least 40 cells of the Zoology grid, its cheapest settings whole, trained with
    the grid's recipe through ``--scheduler local:2``, a run that finished."""
    name = "mqar_zoology_smallest.csv"
    text = resources.files("ttr_edu.experiments").joinpath("results", name).read_text()
    meta, rows = runner.read(mqar.EXPERIMENT, name, text=text)
    command = shlex.split(meta["command"])
    assert command[command.index("--grid") + 1] == "zoology" and command[command.index("--scheduler") + 1] == "local:2"
    count = int(command[command.index("--smallest") + 1])
    wanted = [asdict(c) for c in mqar.smallest(mqar.ZOOLOGY_GRID, count)]
    assert count >= 40 and len(rows) >= 40
    assert sorted(mqar.EXPERIMENT.cell_of(c) for c in wanted) == sorted(mqar.EXPERIMENT.cell_of(r) for r in rows)
    assert meta["recipe"] == mqar.ZOOLOGY_GRID.recipe() and {r["recipe"] for r in rows} == {meta["recipe hash"]}
    assert meta["dask workers"].startswith("2 local worker processes")
    assert all(0 < r["steps"] <= mqar.ZOOLOGY_GRID.zoology.max_steps or r["accuracy"] == 0.0 for r in rows)
    assert [line for line in text.splitlines() if line.startswith("#")][-1].startswith("# finished:")
