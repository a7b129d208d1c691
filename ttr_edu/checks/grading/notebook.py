"""What of a submitted notebook the engine runs, read against the notebook it was released as (or its nbgrader
source, whose graded cells may hold hidden tests).

* **Setup cells**: the release's code cells above its first exercise (imports, seeds), never the student's copy of
  them: they run before the answers' process locks itself down, so they must be the course's own code.
* **The student's code**: the exercise cells (found by nbgrader ``grade_id``) and the code cells the student added,
  in the student's order. A cell of the release is known by its cell id or, where the notebook has none or new ones
  (saved as nbformat 4.4 by Colab or an older Jupyter), by its code: a cell whose code is one of the release's code
  cells' is the release's, and is not run; an edited one is the student's own. A graded cell's answers may use
  whatever of it stands above that graded cell (the last copy of a graded cell pasted twice, as nbgrader keeps the
  last). A missing exercise cell (deleted, or its nbgrader
  metadata removed) runs nothing: under nbgrader the notebook read against is ``source/``, whose exercise cells are the
  instructor's solutions. The names it defines in the release (:attr:`Plan.missing`, read with :mod:`ast`, never run)
  let the engine call its exercise not attempted.
* **Graded cells**: the release's (or source's), never the student's; the checks each calls are read from its code
  (``checks.check_<name>(<expression>, ...)``: the answer, and the other inputs a staged check or a check not
  declared for the engine may take, e.g. the student's own choice of point), and its hidden tests
  (``### BEGIN HIDDEN TESTS``) kept apart.

The release's other cells (the chapter's experiments) are not run by the grader.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import nbformat

__all__ = [
    "Check",
    "Unit",
    "Plan",
    "plan",
    "grade_id",
    "is_graded_check",
    "is_answer",
    "is_course_notebook",
    "EXERCISE_HEADING",
]

EXERCISE_HEADING = re.compile(r"^#+\s*(.*?)\s*[★☆]", re.MULTILINE)
HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS[^\n]*\n(.*?)^[ \t]*### END HIDDEN TESTS[^\n]*$", re.S | re.M)


def _grading(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def grade_id(cell) -> str | None:
    """The cell's nbgrader ``grade_id``, or None."""
    return _grading(cell).get("grade_id")


def is_graded_check(cell) -> bool:
    """A graded test cell (nbgrader ``grade`` and not ``solution``): the cell that calls an exercise's check."""
    meta = _grading(cell)
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) and not meta.get("solution")


def is_answer(cell) -> bool:
    """An exercise's answer cell (nbgrader ``solution``)."""
    return bool(_grading(cell).get("solution"))


@dataclass(frozen=True)
class Check:
    """One check a graded cell calls: ``module.check`` on the answer named by ``expression`` (e.g. ``"write"``), or on
    the ``arguments`` values of ``expression`` when it lists several (``"my_step, initial_state, MY_POINT"``)."""

    module: str
    check: str
    expression: str
    arguments: int = 1


@dataclass
class Unit:
    """One graded cell: what it is worth, the checks it calls, its hidden tests, and how many of the student's cells
    (:attr:`Plan.cells`, in order) stand above it."""

    grade_id: str
    points: float
    heading: str
    checks: list[Check]
    hidden: str
    upto: int


@dataclass
class Plan:
    """What the engine runs for one submission: the setup cells, the student's cells ``(name, code)`` in order, the
    graded cells; ``problems`` are notes for the student and the instructor."""

    setup: list[str]
    cells: list[tuple[str, str]]
    units: list[Unit]
    problems: list[str] = field(default_factory=list)
    #: names the release's exercise cells define (functions, classes, assignments) -> the grade id of the exercise cell
    #: the student's notebook lacks: nothing of those cells runs
    missing: dict[str, str] = field(default_factory=dict)


def _defined(source: str) -> list[str]:
    """The names a cell's code defines at its top level (functions, classes, assignments, imports), read with
    :mod:`ast` (the cell never runs); none when it is not Python."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names += [(a.asname or a.name).split(".")[0] for a in node.names]
    return names


def _normalised(source: str) -> str:
    """A cell's code as compared with the release's: line ends, trailing spaces and blank lines at either end are
    what editors and notebook converters change without the code changing."""
    lines = source.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).strip("\n")


def _checks_called(source: str) -> list[Check]:
    """The ``<alias>.check_<name>(<expression>, ...)`` calls (positional arguments only) of a graded cell whose alias
    names a ``ttr_edu.checks`` module imported in the cell (``from ttr_edu.checks import <module> as <alias>``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "ttr_edu.checks":
            aliases.update({a.asname or a.name: a.name for a in node.names})
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in aliases
            and node.func.attr.startswith("check_")
            and node.args
            and not any(isinstance(a, ast.Starred) for a in node.args)
            and not node.keywords
        ):
            expression = ", ".join(ast.unparse(a) for a in node.args)
            found.append(Check(aliases[node.func.value.id], node.func.attr, expression, len(node.args)))
    return sorted(found, key=lambda c: source.find(f".{c.check}("))


def is_course_notebook(nb: nbformat.NotebookNode) -> bool:
    """Whether ``nb`` is one of ttr-edu's notebooks: one of its graded cells calls a check of ``ttr_edu.checks``."""
    return any(is_graded_check(c) and _checks_called(c.source) for c in nb.cells)


def plan(student: nbformat.NotebookNode, release: nbformat.NotebookNode) -> Plan:
    """Read ``student`` against ``release`` (the release, or nbgrader's source with hidden tests)."""
    first_answer = next((i for i, c in enumerate(release.cells) if is_answer(c)), len(release.cells))
    setup = [c.source for c in release.cells[:first_answer] if c.cell_type == "code" and not is_graded_check(c)]
    exercises = {grade_id(c): c.source for c in release.cells if is_answer(c)}
    graded = [grade_id(c) for c in release.cells if is_graded_check(c)]
    release_ids = {c.get("id") for c in release.cells} - {None}
    # the release's other code cells (setup, the chapter's experiments), also known by their code: a notebook saved
    # without cell ids (nbformat 4.4: Colab, older Jupyter) or with new ones still holds them, and they are not the
    # student's own cells
    release_code = {
        _normalised(c.source)
        for c in release.cells
        if c.cell_type == "code" and not is_answer(c) and not is_graded_check(c) and c.source.strip()
    }
    given = {grade_id(c) for c in student.cells if c.cell_type == "code"}
    absent = [gid for gid in exercises if gid not in given]  # never run: under nbgrader, these are the solutions
    missing = {name: gid for gid in absent for name in _defined(exercises[gid])}
    cells: list[tuple[str, str]] = []
    upto, counts, own = {}, {}, 0
    for cell in student.cells:
        gid = grade_id(cell)
        counts[gid] = counts.get(gid, 0) + 1
        if gid in graded:
            upto[gid] = len(cells)  # the last copy counts, as nbgrader keeps the last
        elif cell.cell_type != "code":
            continue
        elif gid in exercises:
            cells.append((f"exercise cell {gid}", cell.source))
        elif (
            gid is None
            and cell.get("id") not in release_ids
            and cell.source.strip()
            and _normalised(cell.source) not in release_code
        ):
            own += 1
            cells.append((f"your cell {own}", cell.source))
    problems = [
        f"the cell {gid!r} is in the notebook {'twice' if count == 2 else f'{count} times'} (a pasted copy?): the "
        "last one counts; delete the others"
        for gid, count in counts.items()
        if gid is not None and count > 1
    ]
    problems += [
        f"the exercise cell {gid!r} is not in the notebook (deleted, or its nbgrader metadata removed): its exercise "
        "counts as not attempted"
        for gid in absent
    ]
    units, heading, last = [], None, len(cells)
    for cell in release.cells:
        if cell.cell_type == "markdown":
            match = EXERCISE_HEADING.search(cell.source)
            heading = match.group(1) if match else heading
            continue
        if not is_graded_check(cell):
            continue
        gid = grade_id(cell)
        hidden = "\n".join(m.group(1) for m in HIDDEN.finditer(cell.source))
        points = float(_grading(cell).get("points", 0))
        checks = _checks_called(HIDDEN.sub("", cell.source))
        # a graded cell the student deleted stands where nbgrader puts it back: below everything
        units.append(Unit(gid, points, heading or gid.removeprefix("test_"), checks, hidden, upto.get(gid, last)))
    return Plan(setup, cells, units, problems, missing)
