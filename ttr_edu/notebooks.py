"""The notebook pipeline: ``solutions/`` is the source, ``chapters/`` is generated from it (DESIGN.md §4).

A student notebook is the solved notebook passed through nbgrader's ``ClearSolutions`` (each region between
``### BEGIN SOLUTION`` and ``### END SOLUTION`` becomes ``raise NotImplementedError()``) and nbconvert's
``ClearOutputPreprocessor``. Instructors can import either folder into nbgrader unchanged.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

__all__ = [
    "SOLUTION_MARKERS",
    "CourseLayoutError",
    "NotebookError",
    "Chapter",
    "course_root",
    "list_chapters",
    "clean_notebook",
    "student_notebook",
    "generate",
]

SOLUTION_MARKERS = ("BEGIN SOLUTION", "END SOLUTION")
CHAPTER_NAME = re.compile(r"^(\d\d)_([a-z0-9_]+)\.ipynb$")


class CourseLayoutError(FileNotFoundError):
    """The course folders (``solutions/``, ``chapters/``, ``book.yml``) are not where they should be."""


class NotebookError(ValueError):
    """A notebook in the course cannot be read or converted; the message names the file."""


@dataclass(frozen=True)
class Chapter:
    """One chapter: its two-digit number, its slug and its title (the notebook's first heading)."""

    number: str
    slug: str
    title: str
    n_exercises: int

    @property
    def filename(self) -> str:
        return f"{self.number}_{self.slug}.ipynb"


def course_root(start: str | Path | None = None) -> Path:
    """Find the course checkout: the first folder holding ``book.yml`` and ``solutions/``.

    With ``start`` (``--root``), only that folder is accepted: a wrong root is an error, not a reason to use
    another course. Without it, looks at the current folder and its parents, then at the folder this package was
    installed from (an editable install of a clone).

    Raises:
        CourseLayoutError: no such folder was found (or ``start`` is a file); the message says where it looked.
    """
    if start is not None:  # an explicit root is used as given, never replaced by another course found elsewhere
        start = Path(start)
        if not start.exists():
            raise CourseLayoutError(f"root: {start} does not exist")
        if not start.is_dir():
            raise CourseLayoutError(f"root: {start} is a file; pass the course folder (it holds book.yml and solutions/)")
        candidates = [start.resolve()]
    else:
        here = Path.cwd().resolve()
        candidates = [here, *here.parents, Path(__file__).resolve().parents[1]]
    for folder in candidates:
        if (folder / "book.yml").is_file() and (folder / "solutions").is_dir():
            return folder
    where = f"at {start}" if start is not None else f"at {Path.cwd()} or above"
    raise CourseLayoutError(
        f"root: no course found {where} (a course folder holds book.yml and solutions/); "
        "run from a clone of ttr-edu or pass --root"
    )


def _read(path: Path) -> nbformat.NotebookNode:
    """Read a notebook; a file that is not a valid notebook raises :class:`NotebookError` naming it."""
    try:
        return nbformat.read(path, as_version=4)
    except OSError:
        raise
    except Exception as err:  # NotJSONError, JSONDecodeError, UnicodeDecodeError, schema errors
        raise NotebookError(f"{path}: not a readable notebook ({type(err).__name__}: {str(err).splitlines()[0][:120]})") from err


def _exercise_count(nb: nbformat.NotebookNode) -> int:
    return sum(cell.get("metadata", {}).get("nbgrader", {}).get("solution", False) for cell in nb.cells)


def _title(nb: nbformat.NotebookNode, fallback: str) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return fallback


def list_chapters(root: Path, folder: str = "solutions") -> list[Chapter]:
    """The chapters in ``root/folder``, in order. Files not named ``NN_slug.ipynb`` are ignored."""
    chapters = []
    for path in sorted((root / folder).glob("*.ipynb")):
        match = CHAPTER_NAME.match(path.name)
        if match:
            nb = _read(path)
            chapters.append(Chapter(match[1], match[2], _title(nb, match[2]), _exercise_count(nb)))
    return chapters


def clean_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of ``nb`` without outputs, execution counts or saved widget state."""
    from nbconvert.preprocessors import ClearOutputPreprocessor

    nb = copy.deepcopy(nb)
    nb, _ = ClearOutputPreprocessor().preprocess(nb, {})
    nb.metadata.pop("widgets", None)
    return nb


def student_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The student version of a solved notebook: solutions replaced by stubs, outputs cleared.

    Raises:
        RuntimeError: a solution region sits in a cell without nbgrader solution metadata (nbgrader's check).
    """
    try:
        from nbgrader.preprocessors import ClearSolutions
    except ImportError as err:  # nbgrader is an instructor tool, in the dev extra
        raise ImportError("generating student notebooks needs nbgrader: pip install 'ttr-edu[dev]'") from err
    nb = clean_notebook(nb)
    nb, _ = ClearSolutions().preprocess(nb, {})
    return nb


def _serialise(nb: nbformat.NotebookNode) -> str:
    return nbformat.writes(nb) + "\n"


def _same_notebook(path: Path, text: str) -> bool:
    """Whether ``path`` already holds ``text`` as JSON; a missing, unreadable or broken file is simply out of date."""
    try:
        return json.loads(path.read_text(encoding="utf-8")) == json.loads(text)
    except (OSError, ValueError):
        return False


def generate(root: Path, check: bool = False) -> list[str]:
    """Regenerate ``chapters/`` from ``solutions/`` (and store ``solutions/`` clean).

    Args:
        root: the course folder (see :func:`course_root`).
        check: when true, write nothing and only report what is out of date.

    Returns:
        One line per file that is (or, with ``check``, would be) written or removed; empty when in sync.

    Raises:
        CourseLayoutError: ``chapters`` exists but is not a folder.
        NotebookError: a solution notebook cannot be read, or holds a solution region outside a solution cell.
    """
    chapters_dir = root / "chapters"
    if chapters_dir.exists() and not chapters_dir.is_dir():
        raise CourseLayoutError(f"{chapters_dir} is a file; chapters/ must be a folder (move the file away)")
    if not check:
        chapters_dir.mkdir(exist_ok=True)
    problems = []
    expected = set()
    for source in sorted((root / "solutions").glob("*.ipynb")):
        solved = _read(source)
        try:
            student = student_notebook(solved)
        except RuntimeError as err:  # nbgrader: a solution region in a cell without solution metadata
            raise NotebookError(f"{source}: {err}") from err
        targets = {source: _serialise(clean_notebook(solved)), chapters_dir / source.name: _serialise(student)}
        expected.add(source.name)
        for path, text in targets.items():
            if _same_notebook(path, text):
                continue
            verb = "would write" if check else "wrote"
            problems.append(f"{verb} {path.relative_to(root)}")
            if not check:
                path.write_text(text, encoding="utf-8")
    for stale in sorted(chapters_dir.glob("*.ipynb")) if chapters_dir.is_dir() else []:
        if stale.name not in expected:
            problems.append(f"{'would remove' if check else 'removed'} {stale.relative_to(root)} (no solution source)")
            if not check:
                stale.unlink()
    return problems
