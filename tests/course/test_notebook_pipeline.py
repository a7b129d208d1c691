"""chapters/ is generated from solutions/: in sync, free of solution text, stored without outputs."""

import json
from pathlib import Path

import nbformat
import pytest

from ttr_edu.course.notebooks import SOLUTION_MARKERS, generate, student_notebook

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))


def test_there_are_chapters_and_each_has_its_solution():
    assert SOLUTIONS, "no notebooks in solutions/"
    assert [p.name for p in CHAPTERS] == [p.name for p in SOLUTIONS]


def test_chapters_are_in_sync_with_solutions():
    assert generate(ROOT, check=True) == [], "run `ttr-edu generate`"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_student_notebook_holds_no_solution_text(path):
    text = path.read_text(encoding="utf-8")
    for marker in SOLUTION_MARKERS:
        assert marker not in text
    solved = nbformat.read(ROOT / "solutions" / path.name, as_version=4)
    student = nbformat.read(path, as_version=4)
    for before, after in zip(solved.cells, student.cells):
        if before.metadata.get("nbgrader", {}).get("solution") and "BEGIN SOLUTION" in before.source:
            assert "raise NotImplementedError()" in after.source
            inside = before.source.split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
            for line in filter(None, (raw.strip() for raw in inside.splitlines())):
                assert line not in after.source, f"solution line leaked: {line!r}"


@pytest.mark.parametrize("path", SOLUTIONS + CHAPTERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_notebook_is_stored_clean(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_every_solution_region_sits_inside_a_marked_cell_and_a_function(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if "BEGIN SOLUTION" in cell.source:
            assert cell.metadata.get("nbgrader", {}).get("solution"), "solution region outside a solution cell"
            # A stub inside a function body keeps the student notebook running top to bottom.
            before = cell.source.split("### BEGIN SOLUTION")[0]
            assert "def " in before, "a solution region must sit inside a function body"


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_every_chapter_has_an_exercise_and_a_check_after_it(path):
    nb = nbformat.read(path, as_version=4)
    sources = [cell.source for cell in nb.cells]
    exercises = [i for i, source in enumerate(sources) if "BEGIN SOLUTION" in source]
    assert exercises, "every chapter has at least one exercise"
    for i in exercises:
        assert any(".check_" in source for source in sources[i + 1 : i + 4]), f"cell {i}: no check follows"


def test_generator_replaces_solutions_and_refuses_unmarked_regions():
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 42\n    ### END SOLUTION")]
    )
    with pytest.raises(RuntimeError, match="non-solution cell"):
        student_notebook(nb)
    nb.cells[0].metadata["nbgrader"] = {
        "solution": True,
        "grade": False,
        "locked": False,
        "grade_id": "f",
        "schema_version": 3,
    }
    out = student_notebook(nb)
    assert "return 42" not in out.cells[0].source and "raise NotImplementedError()" in out.cells[0].source
