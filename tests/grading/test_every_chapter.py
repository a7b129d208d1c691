"""Every chapter's notebook through the grading engine: the solved notebook scores full marks and the release
(unsolved) scores 0. In the engine each answer runs with every package function its exercise does not give emptied
(``@exercise(given=...)``, grading.md section 4), so a chapter whose solution leans on a package function its
exercise does not declare loses points here."""

from pathlib import Path

import nbformat
import pytest

from tests.grading.submissions import without_cell_ids
from ttr_edu.checks.grading import engine

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted(p.stem for p in (ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))

pytestmark = [pytest.mark.notebook, pytest.mark.slow]


def test_every_chapter_is_here():
    assert [c[:2] for c in CHAPTERS] == [f"{n:02d}" for n in range(1, len(CHAPTERS) + 1)] and len(CHAPTERS) >= 13


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_solved_notebook_scores_full_marks_and_the_release_nothing(chapter):
    release = nbformat.read(ROOT / "chapters" / f"{chapter}.ipynb", as_version=4)
    solved = nbformat.read(ROOT / "solutions" / f"{chapter}.ipynb", as_version=4)
    report = engine.grade(solved, release, timeout=120)
    assert report.max_score > 0
    assert report.score == report.max_score, [
        (v.grade_id, v.status, v.detail) for v in report.verdicts if v.status != "PASS"
    ]
    unsolved = engine.grade(release, release, timeout=120)
    assert unsolved.score == 0, [(v.grade_id, v.status, v.detail) for v in unsolved.verdicts if v.status == "PASS"]


@pytest.mark.parametrize("chapter", ["01_hebbian_memory", "04_delta_rule"])
def test_the_solved_notebook_saved_without_cell_ids_scores_full_marks(chapter):
    """As Colab or an older Jupyter saves it (nbformat 4.4, no cell ids): the chapter's experiment cells are the
    release's, known by their code, and do not run among the student's own cells."""
    release = nbformat.read(ROOT / "chapters" / f"{chapter}.ipynb", as_version=4)
    solved = without_cell_ids(nbformat.read(ROOT / "solutions" / f"{chapter}.ipynb", as_version=4))
    assert solved.nbformat_minor == 4 and not any("id" in c for c in solved.cells)
    report = engine.grade(solved, release, timeout=120)
    assert report.score == report.max_score > 0, [
        (v.grade_id, v.status, v.detail) for v in report.verdicts if v.status != "PASS"
    ]
