"""Grading: every check cell is an nbgrader test worth its exercise's stars; under nbgrader's autograder an
unattempted exercise scores 0 and a solved one full marks, while in the student's own kernel it runs on."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from ttr_edu.checks._core import CheckFailed, run_check
from ttr_edu.course.notebooks import CHECK_CALL, STARS

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "solutions").glob("*.ipynb")) + sorted((ROOT / "chapters").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_check_cell_is_a_locked_graded_test_worth_its_stars(path):
    nb = nbformat.read(path, 4)
    stars, checks = 1, 0
    for cell in nb.cells:
        if cell.cell_type == "markdown" and STARS.search(cell.source):
            stars = len(STARS.search(cell.source).group())
        if cell.cell_type == "code" and CHECK_CALL.search(cell.source):
            checks += 1
            meta = cell.metadata.get("nbgrader", {})
            assert meta.get("grade") is True and meta.get("locked") is True and meta.get("solution") is False
            assert meta.get("points") == stars, f"{path.name}: {cell.source.strip()} is worth {meta.get('points')}"
            assert meta.get("grade_id", "").startswith("test_check_")
    solutions = sum(c.metadata.get("nbgrader", {}).get("solution", False) for c in nb.cells)
    assert checks == solutions, f"{path.name}: {solutions} exercises but {checks} graded check cells"


def _stub(x):
    raise NotImplementedError()


def test_not_attempted_prints_for_the_student_and_fails_under_the_autograder(monkeypatch, capsys):
    cases = [{"x": 1.0}]
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert run_check("demo", _stub, lambda x: x, cases) is False
    assert "[not attempted yet] demo" in capsys.readouterr().out
    for mode in ("autograde", "validate"):  # what nbgrader 0.9 sets while it autogrades / validates
        monkeypatch.setenv("NBGRADER_EXECUTION", mode)
        with pytest.raises(CheckFailed, match="demo: not attempted"):
            run_check("demo", _stub, lambda x: x, cases)
    assert run_check("demo", lambda x: x, lambda x: x, cases) is True  # a solved exercise still passes


@pytest.mark.slow
@pytest.mark.notebook
def test_nbgrader_scores_an_unsolved_chapter_0_and_a_solved_one_full_marks(tmp_path):
    """nbgrader's own generate_assignment and autograde on chapter 01, as the instructor guide (grading.md) says."""
    pytest.importorskip("nbgrader")
    chapter = ROOT / "solutions" / "01_hebbian_memory.ipynb"
    (tmp_path / "source" / "ch01").mkdir(parents=True)
    shutil.copy(chapter, tmp_path / "source" / "ch01")
    (tmp_path / "nbgrader_config.py").write_text(
        'c = get_config()\nc.CourseDirectory.course_id = "ttr-edu"\nc.CourseDirectory.db_url = "sqlite:///gradebook.db"\n'
        "c.Execute.iopub_timeout = 120\n"  # nbgrader waits 4 s for output by default: too little on a loaded CI machine
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    nbgrader = [sys.executable, "-m", "nbgrader"]

    def run(*args):
        result = subprocess.run(
            nbgrader + list(args), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]

    run("generate_assignment", "ch01", "--force")
    released = tmp_path / "release" / "ch01" / chapter.name
    for student, notebook in (("unsolved", released), ("solved", chapter)):
        (tmp_path / "submitted" / student / "ch01").mkdir(parents=True)
        shutil.copy(notebook, tmp_path / "submitted" / student / "ch01")
    run("autograde", "ch01", "--create", "--force")

    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gradebook:
        scores = {s: gradebook.find_submission("ch01", s) for s in ("unsolved", "solved")}
        got = {s: (sub.score, sub.max_score) for s, sub in scores.items()}
    nb = nbformat.read(chapter, 4)
    full = sum(c.metadata["nbgrader"]["points"] for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade"))
    print(f"nbgrader scores: {got}")
    assert full > 0
    assert got == {"unsolved": (0.0, full), "solved": (full, full)}
