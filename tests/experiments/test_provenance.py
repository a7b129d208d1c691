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

from ttr_edu.experiments import mqar, mqar_memories, runner

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
def test_the_header_names_the_command_the_version_and_the_recipe(name):
    meta, rows = shipped(name)
    experiment, recipe, prog = SHIPPED[name]
    assert meta["experiment"] == prog and meta["recipe"] == recipe and meta["recipe hash"] == runner.recipe_hash(recipe)
    assert {r["recipe"] for r in rows} == {meta["recipe hash"]} and {r["version"] for r in rows} == {meta["ttr-edu"]}
    command = shlex.split(meta["command"])
    assert command[:4] == ["python", "-m", "ttr_edu.experiments", prog]
    assert "--max-steps" not in command and "--seeds" not in command and "--quick" not in command
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
    wanted = mqar.sweep([asdict(c) for c in mqar.COURSE_GRID.cells()])(rows)
    assert sorted(mqar.EXPERIMENT.cell_of(c) for c in wanted) == sorted(mqar.EXPERIMENT.cell_of(r) for r in rows)
    assert all(r["steps"] <= mqar.COURSE_GRID.max_steps and r["vocab_size"] == 8192 for r in rows)


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
