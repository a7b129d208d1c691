"""``ttr-edu check``: grade a student's notebook with the course's grading engine and say how each exercise fares.

The verdicts are the engine's (:func:`ttr_edu.checks.grading.engine.grade`), the same that ``nbgrader autograde`` gets
with the course's configuration (``grading.md``): the release's setup cells and graded cells, the student's exercise
cells and cells of their own, each graded cell's answers run in a sandboxed process of their own and judged in this one.
Nothing the notebook prints, and no code in it, can pass an exercise.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from ttr_edu.checks.grading import notebook
from ttr_edu.course.notebooks import CHAPTER_NAME

if TYPE_CHECKING:
    import nbformat

    from ttr_edu.checks.grading.engine import Report

__all__ = ["release_for", "grade", "marked_by_hand"]


def _grade_id(cell) -> str | None:
    return notebook.grade_id(cell)


def _grading(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def release_for(path: Path, nb: nbformat.NotebookNode, releases: list[Path]) -> Path | None:
    """The release notebook a student's notebook was copied from: the one sharing most of its exercise ids (nbgrader
    ``grade_id``, unique to a chapter), else the one with the same chapter slug in its file name; None if neither."""
    import nbformat

    ids = {_grade_id(c) for c in nb.cells} - {None}
    best, best_overlap = None, 0
    for release in releases:
        try:
            shipped = nbformat.read(release, as_version=4)
        except Exception:  # an unreadable release is not a match
            continue
        overlap = len(ids & {_grade_id(c) for c in shipped.cells if _grading(c).get("solution")})
        if overlap > best_overlap:
            best, best_overlap = release, overlap
    if best is not None:
        return best
    slug = re.match(r"^\d\d_([a-z0-9_]+?)(?:[.-].*)?\.ipynb$", path.name)
    for release in releases:
        match = CHAPTER_NAME.match(release.name)
        if slug and match and match[2] == slug[1]:
            return release
    return None


def grade(nb: nbformat.NotebookNode, release: nbformat.NotebookNode, timeout: float) -> Report:
    """The engine's verdicts on ``nb`` (a student's copy of ``release``), each graded cell's answers given
    ``timeout`` seconds."""
    from ttr_edu.checks.grading import engine

    return engine.grade(nb, release, timeout=timeout)


def marked_by_hand(release: nbformat.NotebookNode) -> list[tuple[str, float]]:
    """The exercises of ``release`` that an instructor marks by hand (nbgrader tasks), which no check can grade:
    ``(heading, points)`` each, the heading being the task cell's first line without its ``#`` marks and its
    parenthesis (``"Exercise 13.3 — where your point lands"``)."""
    found = []
    for cell in release.cells:
        grading = _grading(cell)
        if grading.get("task"):
            first = cell.source.strip().splitlines()[0] if cell.source.strip() else grading.get("grade_id", "")
            found.append((first.lstrip("#").split(" (", 1)[0].strip(), float(grading.get("points", 0))))
    return found
