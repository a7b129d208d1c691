"""Every shipped MQAR CSV says how to reproduce it (a commit of this repository and the command), is a complete run of
the protocol its recipe records, loads with the current reader, and chapter 09 takes its numbers from these files and
no other."""

import ast
import shlex
import subprocess
from importlib import resources
from pathlib import Path

import nbformat
import pytest

from ttr_edu.experiments import mqar, mqar_memories, runner

ROOT = Path(__file__).resolve().parents[2]
#: The shipped CSVs are the first course grid and the first memories grid: complete runs of an earlier recipe (the
#: learning rate swept on the first seed), written before the header recorded the training code and the machine.
SHIPPED = {"mqar_grid.csv": "mqar", "mqar_memories.csv": "mqar_memories"}


def shipped(name):
    text = resources.files("ttr_edu.experiments").joinpath("results", name).read_text()
    if name == "mqar_grid.csv":
        return mqar.read_grid(text, name)
    return runner.read(mqar_memories.EXPERIMENT, name, text=text)


@pytest.mark.parametrize("name", list(SHIPPED))
def test_the_header_names_the_command_the_version_and_the_recipe_of_every_row(name):
    meta, rows = shipped(name)
    assert meta["experiment"] == SHIPPED[name] and isinstance(meta["recipe"], dict)
    assert {r["recipe"] for r in rows} == {meta["recipe hash"]} and {r["version"] for r in rows} == {meta["ttr-edu"]}
    command = shlex.split(meta["command"])
    assert command[:4] == ["python", "-m", "ttr_edu.experiments", SHIPPED[name]]
    assert not {"--max-steps", "--seeds", "--quick", "--smallest"} & set(command)
    assert meta["git commit"] != "unknown" and "uncommitted" not in meta["git commit"]
    assert _comments(name)[-1].startswith("finished:"), "a shipped grid ends with the closing line of a complete run"


def test_the_first_course_grid_loads_in_the_current_layout_and_resume_refuses_it(tmp_path):
    """The shipped course CSV has the first grid's columns; the reader gives its rows the current cell columns with
    the values its recipe fixed (one layer, one head, the course recipe, its filler), keeps their recipe hash, and
    ``--resume`` on it refuses in one line naming the columns it found, without touching the file."""
    text = resources.files("ttr_edu.experiments").joinpath("results", "mqar_grid.csv").read_text()
    columns = next(line for line in text.splitlines() if not line.startswith("#")).split(",")
    assert "filler" not in columns and "n_layers" not in columns  # the first layout
    meta, rows = shipped("mqar_grid.csv")
    assert all(tuple(r) == mqar.EXPERIMENT.columns for r in rows)
    assert {(r["n_layers"], r["num_heads"], r["filler"], r["training"]) for r in rows} == {(1, 1, "random", "course")}
    assert meta["recipe"]["random_non_queries"] is True and {r["recipe"] for r in rows} == {meta["recipe hash"]}
    assert mqar.load_header()["recipe hash"] == meta["recipe hash"]
    copy = tmp_path / "mqar_grid.csv"
    copy.write_text(text)
    with pytest.raises(runner.ResumeRefused, match="its columns are model, feature_map, short_conv, seq_len"):
        mqar.run_grid(mqar.QUICK_GRID, copy, resume=True, progress=False)
    assert copy.read_text() == text


def test_a_csv_of_neither_layout_is_refused_by_name():
    with pytest.raises(ValueError, match="other.csv is not a CSV of the mqar grid: its columns are a, b"):
        mqar.read_grid("# experiment: mqar\na,b\n1,2\n", "other.csv")


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


@pytest.mark.parametrize("name", list(SHIPPED))
def test_each_shipped_grid_swept_the_rate_on_its_first_seed_and_trained_the_others_at_one_rate(name):
    """The protocol the shipped recipes record (``sweep_on_first_seed``): every setting has each swept rate on its
    first seed and each other seed at exactly one rate, the one :func:`mqar.choose_lr` picks from the first seed, so
    the chapter's best rate holds all three seeds."""
    meta, rows = shipped(name)
    assert meta["recipe"]["sweep_on_first_seed"] is True
    experiment = mqar.EXPERIMENT if name == "mqar_grid.csv" else mqar_memories.EXPERIMENT
    setting = [k for k in experiment.key if k not in ("lr", "seed")]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in setting), []).append(r)
    swept = {r["lr"] for r in rows}
    for group in groups.values():
        first = min(r["seed"] for r in group)
        assert {r["lr"] for r in group if r["seed"] == first} == swept, group
        others = {r["seed"]: [] for r in group if r["seed"] != first}
        for r in group:
            if r["seed"] != first:
                others[r["seed"]].append(r["lr"])
        assert all(len(lrs) == 1 for lrs in others.values()), group
        picked = {lrs[0] for lrs in others.values()}
        assert picked == {mqar.choose_lr([r for r in group if r["seed"] == first])}, group  # today's pick too


def test_chapter_09_reads_its_numbers_from_the_shipped_csvs_only():
    """Every grid number of chapter 09 comes from ``load_results()`` of the two shipped CSVs: the notebook calls
    both without a path, opens no other file, trains no grid of its own, and renders the course grid's recipe from
    the shipped CSV's header (``load_header()``), not from the current grid's definition."""
    nb = nbformat.read(ROOT / "solutions" / "09_associative_recall.ipynb", 4)
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    calls = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)]
    names = [ast.unparse(node.func) for node in calls]
    loads = [node for node, name in zip(calls, names) if name.endswith("load_results")]
    assert sorted(ast.unparse(node.func) for node in loads) == ["load_results", "mqar_memories.load_results"]
    assert all(not node.args and not node.keywords for node in loads), "the chapter reads the shipped CSVs"
    assert not any(name in ("open", "Path", "run_grid") or name.endswith(("read_csv", "run_grid")) for name in names)
    assert "load_header" in names and "COURSE_GRID" not in source


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
