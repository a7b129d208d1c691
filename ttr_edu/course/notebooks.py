"""The notebook pipeline: ``solutions/`` is the source, ``chapters/`` is generated from it.

A student notebook is the solved notebook passed through nbgrader's ``ClearSolutions`` (each region between
``### BEGIN SOLUTION`` and ``### END SOLUTION`` becomes ``raise NotImplementedError()``) and nbconvert's
``ClearOutputPreprocessor``. ``generate`` also stamps nbgrader's test metadata on every check cell (the cell that calls
``checks.check_...``): graded, locked, worth as many points as the exercise has stars, its first line importing the
check module afresh. Instructors can therefore import either folder into nbgrader unchanged and get a graded
assignment (see ``grading.md``).
"""

from __future__ import annotations

import copy
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ttr_edu._internal.install import pip_install_extra

if TYPE_CHECKING:  # nbformat is imported where it is used: `ttr-edu copy` and `start` start faster without it
    import nbformat

__all__ = [
    "SOLUTION_MARKERS",
    "CourseLayoutError",
    "NotebookError",
    "Chapter",
    "course_root",
    "course_content",
    "PACKAGED_COURSE",
    "list_chapters",
    "clean_notebook",
    "student_notebook",
    "generate",
    "stamp_grading",
    "write_atomically",
]

SOLUTION_MARKERS = ("BEGIN SOLUTION", "END SOLUTION")
CHAPTER_NAME = re.compile(r"^(\d\d)_([a-z0-9_]+)\.ipynb$")
CHECK_CALL = re.compile(r"\bchecks\.(check_\w+)\(")  # a check cell calls checks.check_..., alone or in an expression
CHECKS_IMPORT = re.compile(r"^from ttr_edu\.checks import (\w+) as checks\b.*$", re.MULTILINE)
#: The first line of every graded check cell: the cell imports its check module itself, so that a cell above which
#: rebinds ``checks`` changes nothing (the modules themselves are read-only: ttr_edu.checks._core.seal).
FRESH_IMPORT = "from ttr_edu.checks import {module} as checks  # the graded check, fresh from the package"
STARS = re.compile(r"★+")  # an exercise heading's difficulty, "★★☆": its filled stars are its points


class CourseLayoutError(FileNotFoundError):
    """The course folders (``solutions/``, ``chapters/``, ``book.yml``) are not where they should be."""


class NotebookError(ValueError):
    """A notebook in the course cannot be read or converted; the message names the file."""


@dataclass(frozen=True)
class Chapter:
    """One chapter: its two-digit number, its slug and its title (the notebook's first heading); ``n_exercises``
    answer cells, and ``n_by_hand`` answers an instructor marks by hand (nbgrader tasks)."""

    number: str
    slug: str
    title: str
    n_exercises: int
    n_by_hand: int = 0

    @property
    def filename(self) -> str:
        return f"{self.number}_{self.slug}.ipynb"


#: the course a wheel installs (``setup.py`` copies chapters/, the pages, images/ and references.bib here when it
#: builds the wheel); a clone has none and uses its own folders
PACKAGED_COURSE = Path(__file__).resolve().with_name("content")
REPOSITORY = "https://github.com/ttr-edu/ttr-edu"


def _is_clone(folder: Path) -> bool:
    return (folder / "book.yml").is_file() and (folder / "solutions").is_dir()


def _explicit(start: str | Path) -> Path:
    start = Path(start)
    if not start.exists():
        raise CourseLayoutError(f"root: {start} does not exist")
    if not start.is_dir():
        raise CourseLayoutError(f"root: {start} is a file; pass the course folder (it holds book.yml and solutions/)")
    return start.resolve()


def course_root(start: str | Path | None = None, *, command: str | None = None) -> Path:
    """Find the course's sources, a clone of the repository: the first folder holding ``book.yml`` and
    ``solutions/``. ``generate`` and ``book`` need them; the student commands use :func:`course_content`.

    With ``start`` (``--root``), only that folder is accepted: a wrong root is an error, not a reason to use
    another course. Without it, looks at the current folder and its parents, then at the folder this package was
    installed from (an editable install of a clone).

    Raises:
        CourseLayoutError: no such folder was found (or ``start`` is a file); the message says where it looked, and
            for ``command`` (``"generate"``) that the command works from a clone.
    """
    if start is not None:  # an explicit root is used as given, never replaced by another course found elsewhere
        candidates = [_explicit(start)]
    else:
        here = Path.cwd().resolve()
        candidates = [here, *here.parents, Path(__file__).resolve().parents[2]]
    for folder in candidates:
        if _is_clone(folder):
            return folder
    where = f"at {start}" if start is not None else f"at {Path.cwd()} or above"
    if command is not None:
        raise CourseLayoutError(
            f"ttr-edu {command} works from a clone of ttr-edu, which holds the course's sources (book.yml and "
            f"solutions/); there is none {where}: git clone {REPOSITORY}, then run it there or pass --root"
        )
    raise CourseLayoutError(
        f"root: no course found {where} (a course folder holds book.yml and solutions/); "
        "run from a clone of ttr-edu or pass --root"
    )


def course_content(start: str | Path | None = None) -> Path:
    """Where the student notebooks come from (``list``, ``copy``, ``start``): a folder holding ``chapters/`` and
    the pages and ``references.bib`` the chapters refer to.

    With ``start`` (``--root``), that folder, which must hold ``chapters/``. Without it, a clone found as
    :func:`course_root` finds one (so a clone's own chapters win), else the course installed with this package
    (:data:`PACKAGED_COURSE`).

    Raises:
        CourseLayoutError: no course was found; the message says where it looked.
    """
    if start is not None:
        folder = _explicit(start)
        if (folder / "chapters").is_dir():
            return folder
        raise CourseLayoutError(
            f"root: no course found at {start} (a course folder holds chapters/, as a clone of ttr-edu does)"
        )
    try:
        return course_root()
    except CourseLayoutError:
        pass
    if (PACKAGED_COURSE / "chapters").is_dir():
        return PACKAGED_COURSE
    raise CourseLayoutError(
        f"no course found: {Path.cwd()} is not in a clone of ttr-edu, and this installation of ttr-edu holds no "
        "course files (a wheel built in a clone holds them: see the README's Quick start)"
    )


def _read(path: Path) -> nbformat.NotebookNode:
    """Read a notebook; a file that is not a valid notebook raises :class:`NotebookError` naming it."""
    import nbformat

    try:
        return nbformat.read(path, as_version=4)
    except OSError:
        raise
    except Exception as err:  # NotJSONError, JSONDecodeError, UnicodeDecodeError, schema errors
        raise NotebookError(
            f"{path}: not a readable notebook ({type(err).__name__}: {str(err).splitlines()[0][:120]})"
        ) from err


def _exercise_count(nb: dict) -> int:
    return sum(cell.get("metadata", {}).get("nbgrader", {}).get("solution", False) for cell in nb["cells"])


def _task_count(nb: dict) -> int:
    return sum(bool(cell.get("metadata", {}).get("nbgrader", {}).get("task", False)) for cell in nb["cells"])


def _title(nb: dict, fallback: str) -> str:
    for cell in nb["cells"]:
        if cell.get("cell_type") == "markdown":
            source = cell.get("source", "")
            for line in ("".join(source) if isinstance(source, list) else source).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return fallback


def list_chapters(root: Path, folder: str = "solutions") -> list[Chapter]:
    """The chapters in ``root/folder``, in order. Files not named ``NN_slug.ipynb`` are ignored.

    Read as plain JSON, so ``ttr-edu list`` needs no Jupyter package.

    Raises:
        NotebookError: a chapter file is not a notebook.
    """
    chapters = []
    for path in sorted((root / folder).glob("*.ipynb")):
        match = CHAPTER_NAME.match(path.name)
        if match:
            try:
                nb = json.loads(path.read_text(encoding="utf-8"))
                cells = nb["cells"]
            except (ValueError, KeyError, TypeError) as err:
                raise NotebookError(f"{path}: not a readable notebook ({type(err).__name__})") from err
            if not isinstance(cells, list):
                raise NotebookError(f"{path}: not a readable notebook (its cells are not a list)")
            chapters.append(Chapter(match[1], match[2], _title(nb, match[2]), _exercise_count(nb), _task_count(nb)))
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
        raise ImportError(
            f"generating student notebooks needs nbgrader, which the [dev] extra installs: {pip_install_extra('dev')}"
        ) from err
    nb = clean_notebook(nb)
    nb, _ = ClearSolutions().preprocess(nb, {})
    return nb


def _fresh_import(source: str, module: str | None) -> str:
    """``source`` of a check cell with :data:`FRESH_IMPORT` as its first line (replacing an earlier one): the same
    text when it is already there, so generating twice changes nothing."""
    if module is None:
        return source
    lines = source.split("\n")
    if lines and CHECKS_IMPORT.match(lines[0]):
        lines = lines[1:]
    return "\n".join([FRESH_IMPORT.format(module=module), *lines])


def stamp_grading(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of ``nb`` whose check cells carry nbgrader's autograder-test metadata and import their check afresh.

    A check cell is a code cell calling ``checks.check_...`` (alone, or in an expression such as
    ``f = mine if checks.check_f(mine) else reference``). It becomes graded and locked, with ``grade_id``
    ``test_<check name>`` and as many points as filled stars (★) in the last exercise heading above it (1 if none).
    Its first line imports the chapter's check module again (:data:`FRESH_IMPORT`; the module is the one the
    notebook imports as ``checks``), so the graded cell uses no name another cell could rebind. Under nbgrader's
    autograder an unattempted or wrong exercise raises, so it scores 0 (``ttr_edu.checks._core``).
    """
    nb = copy.deepcopy(nb)
    imports = [
        CHECKS_IMPORT.search(c.source) for c in nb.cells if c.cell_type == "code" and not CHECK_CALL.search(c.source)
    ]
    module = next((match.group(1) for match in imports if match), None)
    points, seen = 1, set()
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            stars = STARS.search(cell.source)
            if stars:
                points = len(stars.group())
            continue
        match = CHECK_CALL.search(cell.source) if cell.cell_type == "code" else None
        if not match:
            continue
        grade_id = f"test_{match.group(1)}"
        n = 1
        while grade_id in seen:  # the same check called twice still needs two distinct ids
            n += 1
            grade_id = f"test_{match.group(1)}_{n}"
        seen.add(grade_id)
        cell.source = _fresh_import(cell.source, module)
        cell.metadata["nbgrader"] = {
            "grade": True,
            "grade_id": grade_id,
            "locked": True,
            "points": points,
            "schema_version": 3,
            "solution": False,
            "task": False,
        }
    return nb


def _serialise(nb: nbformat.NotebookNode) -> str:
    import nbformat

    return nbformat.writes(nb) + "\n"


def file_mode(path: Path) -> int:
    """The mode a file written at ``path`` gets: the existing file's (not following a symlink), or ``0666`` less the
    umask, as ``open`` would create it."""
    try:
        if not path.is_symlink():
            return path.stat().st_mode & 0o7777
    except OSError:
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomically(path: Path, text: str | bytes) -> None:
    """Write ``text`` (UTF-8 text, or bytes as they are) to ``path`` so that a reader, a crash or a Ctrl-C sees the
    old file or the new, never half.

    The text goes to a temporary file in the same folder, then ``os.replace`` swaps it in. If ``path`` is a
    symbolic link, the link itself is replaced: nothing is ever written through it to a file elsewhere.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, file_mode(path))  # mkstemp's 0600 would hide the notebook from a group sharing the folder
        with os.fdopen(fd, "wb") if isinstance(text, bytes) else os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _same_notebook(path: Path, text: str) -> bool:
    """Whether ``path`` already holds ``text`` as JSON; a missing, unreadable or broken file is simply out of date."""
    try:
        return json.loads(path.read_text(encoding="utf-8")) == json.loads(text)
    except (OSError, ValueError):
        return False


def generate(root: Path, check: bool = False) -> list[str]:
    """Regenerate ``chapters/`` from ``solutions/`` (and store ``solutions/`` clean, with grading metadata), and the
    sources ledger's book page ``sources.md`` from ``sources.yaml`` where the course has one
    (:mod:`ttr_edu.course.sources`).

    All or nothing: every notebook is read and converted before the first file is written, so a broken solution
    notebook leaves both folders as they were; each file is then written atomically.

    Args:
        root: the course folder (see :func:`course_root`).
        check: when true, write nothing and only report what is out of date.

    Returns:
        One line per file that is (or, with ``check``, would be) written or removed; empty when in sync.

    Raises:
        CourseLayoutError: ``chapters`` exists but is not a folder.
        NotebookError: a solution notebook cannot be read, or holds a solution region outside a solution cell.
        SourcesError: ``sources.yaml`` breaks its schema.
    """
    chapters_dir = root / "chapters"
    if chapters_dir.exists() and not chapters_dir.is_dir():
        raise CourseLayoutError(f"{chapters_dir} is a file; chapters/ must be a folder (move the file away)")
    writes: dict[Path, str] = {}
    expected = set()
    for source in sorted((root / "solutions").glob("*.ipynb")):
        solved = stamp_grading(_read(source))
        try:
            student = student_notebook(solved)
        except RuntimeError as err:  # nbgrader: a solution region in a cell without solution metadata
            raise NotebookError(f"{source}: {err}") from err
        expected.add(source.name)
        for path, text in {
            source: _serialise(clean_notebook(solved)),
            chapters_dir / source.name: _serialise(student),
        }.items():
            if not _same_notebook(path, text):
                writes[path] = text
    if (root / "sources.yaml").is_file():
        from ttr_edu.course.sources import load_entries, sources_markdown

        titles = {c.number: (c.filename, c.title) for c in list_chapters(root)}
        page = sources_markdown(load_entries(root / "sources.yaml"), titles)
        if not (root / "sources.md").is_file() or (root / "sources.md").read_text(encoding="utf-8") != page:
            writes[root / "sources.md"] = page
    stale = [p for p in sorted(chapters_dir.glob("*.ipynb")) if p.name not in expected] if chapters_dir.is_dir() else []
    problems = [f"{'would write' if check else 'wrote'} {path.relative_to(root)}" for path in writes]
    problems += [f"{'would remove' if check else 'removed'} {p.relative_to(root)} (no solution source)" for p in stale]
    if not check:
        chapters_dir.mkdir(exist_ok=True)
        for path, text in writes.items():
            write_atomically(path, text)
        for path in stale:
            path.unlink()
    return problems
