"""The grading engine inside ``nbgrader autograde``: two preprocessors that take the place of two of nbgrader's steps
for ttr-edu's notebooks, and step aside for any other notebook.

Installing ttr-edu switches them on: it puts an ``nbgrader_config.py`` into the environment's ``etc/jupyter/`` folder
(``{sys.prefix}/etc/jupyter``), one of the folders of Jupyter's config path, which nbgrader reads before the course's
own ``nbgrader_config.py``. That file calls :func:`use_engine`; a course (or an instructor's ``~/.jupyter``) may call
it too. An instructor turns the engine off with ``c.GradeWithEngine.enabled = False`` in the course's
``nbgrader_config.py``: nbgrader's own ``Execute`` then runs every notebook, as it does without ttr-edu.

* :class:`GradeWithEngine` takes the place of nbgrader's ``Execute``: no kernel runs the submission. The engine grades
  it (:func:`ttr_edu.checks.grading.engine.grade`, against the assignment's ``source/`` notebook, so hidden tests count)
  and each graded cell gets the outputs of its verdict: a ``PASS`` line, or an error that says why. nbgrader's own
  ``SaveAutoGrades`` then scores those outputs as it always does, so the points come from the engine, never from
  anything the student's code printed. What went wrong in a notebook (a timeout, a process that died, a pasted copy
  of a cell) is logged as a warning naming the student and the notebook, and stored in the autograded notebook's
  metadata (``ttr_edu_grading``).
* :class:`DropDuplicateIds` takes the place of ``DeduplicateIds``: a cell pasted twice keeps its last copy, and the
  earlier copies lose their nbgrader metadata entirely (nbgrader 0.9 leaves an empty record that its next step
  refuses as "an old version of the nbgrader metadata format", which stops autograde for the whole class). So does a
  cell whose ``grade_id`` is not the assignment's (or that has none), and every other cell's nbgrader flags
  (``grade``, ``solution``, ``locked``, ``task``, ``points``) are set to the source cell's and its ``schema_version`` to
  the one nbgrader reads: a student who sets the version in JupyterLab's metadata editor stopped the class the same
  way, and one who set ``solution`` on a graded cell made nbgrader's ``OverwriteCells`` drop the whole notebook
  ("Inconsistent checksums": the flags are part of the cell's checksum) and ``autograde`` exit 1 for the class.

Which notebooks are ttr-edu's is read from the assignment's ``source/`` notebook, the instructor's, never from the
submission (a student cannot opt out): one whose graded cells call a check of ``ttr_edu.checks``. Every other notebook
goes to nbgrader's own ``Execute`` and ``DeduplicateIds``, as if ttr-edu were not installed.
"""

from __future__ import annotations

from pathlib import Path

from nbconvert.exporters.exporter import ResourcesDict
from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    ClearOutput,
    DeduplicateIds,
    Execute,
    IgnorePattern,
    LimitOutput,
    NbGraderPreprocessor,
    OverwriteCells,
    OverwriteKernelspec,
    SaveAutoGrades,
)
from traitlets import Bool, Float

from ttr_edu.checks.grading import engine, notebook

__all__ = ["GradeWithEngine", "DropDuplicateIds", "use_engine"]


def _source(config, resources: ResourcesDict) -> tuple[NotebookNode, Path]:
    """The assignment's source notebook (the instructor's, hidden tests included) and the course folder."""
    import nbformat
    from nbgrader.coursedir import CourseDirectory

    coursedir = CourseDirectory(config=config)
    info = resources["nbgrader"]
    folder = Path(coursedir.format_path(coursedir.source_directory, ".", info["assignment"]))
    return nbformat.read(folder / f"{info['notebook']}.ipynb", as_version=4), Path(coursedir.root).resolve()


class _CourseNotebooksOnly(NbGraderPreprocessor):
    """A step for ttr-edu's notebooks; nbgrader's own :attr:`instead` does the step for any other notebook, and for
    every notebook when ``enabled`` is False (never nothing: a skipped grading step would leave no error to score)."""

    instead: type[NbGraderPreprocessor]

    def __call__(self, nb: NotebookNode, resources: ResourcesDict) -> tuple[NotebookNode, ResourcesDict]:
        if self.enabled and self._is_course_notebook(nb, resources):
            return self.preprocess(nb, resources)
        return self.instead(parent=self.parent)(nb, resources)

    def _is_course_notebook(self, nb: NotebookNode, resources: ResourcesDict) -> bool:
        try:
            source, _ = _source(self.config, resources)
        except Exception:  # no source notebook: the submission's graded cells are the gradebook's (OverwriteCells)
            source = nb
        return notebook.is_course_notebook(source)


class DropDuplicateIds(_CourseNotebooksOnly):
    """Keep the last cell of each nbgrader ``grade_id``; earlier copies become plain cells. The nbgrader metadata of a
    cell whose ``grade_id`` is not one of the assignment's (or that has none) is dropped too, and the rest are set to
    the metadata format this nbgrader reads: nbgrader's next step (``CheckCellMetadata``) refuses any other
    ``schema_version`` with an error that stops ``autograde`` for the whole class, and a student sets it in
    JupyterLab's metadata editor. The flags of each cell the source knows (:data:`_FLAGS`) are set to the source
    cell's: ``OverwriteCells`` restores a graded cell's source and points but not its ``grade``/``solution`` flags,
    which its checksum covers, and drops the notebook (an error, ``autograde`` exits 1) where they differ. Each change
    is logged as a warning naming the student and the cell."""

    instead = DeduplicateIds
    enabled = Bool(True, help="False: nbgrader's own DeduplicateIds runs instead, on every notebook").tag(config=True)

    def preprocess(self, nb: NotebookNode, resources: ResourcesDict) -> tuple[NotebookNode, ResourcesDict]:
        from nbgrader.nbgraderformat import MetadataValidator

        who = _who(resources)
        seen = set()
        for cell in reversed(nb.cells):
            gid = notebook.grade_id(cell)
            if gid is None:
                continue
            if gid in seen:
                self.log.warning(
                    "ttr-edu grader: %s: the cell %r is in the notebook more than once (a pasted copy?): the last "
                    "one counts",
                    who,
                    gid,
                )
                del cell.metadata["nbgrader"]
            seen.add(gid)
        try:
            source, _ = _source(self.config, resources)
            flags = {
                notebook.grade_id(c): c.metadata["nbgrader"] for c in source.cells if notebook.grade_id(c) is not None
            }
            known: set | None = set(flags)
        except Exception:  # no source notebook: nbgrader's OverwriteCells reads the gradebook's cells
            flags, known = {}, None
        version = MetadataValidator.schema_version
        for index, cell in enumerate(nb.cells):
            meta = cell.get("metadata", {}).get("nbgrader")
            if meta is None:
                continue
            gid = meta.get("grade_id") if isinstance(meta, dict) else None
            if not isinstance(meta, dict) or gid is None or (known is not None and gid not in known):
                self.log.warning(
                    "ttr-edu grader: %s: cell %d carries nbgrader metadata of no cell of the assignment (%s): "
                    "dropped, the cell counts as a plain cell",
                    who,
                    index + 1,
                    f"grade_id {gid!r}" if gid is not None else "no grade_id",
                )
                del cell.metadata["nbgrader"]
                continue
            if gid in flags:
                self._reset_flags(meta, flags[gid], who, gid)
            if meta.get("schema_version") != version:
                self.log.warning(
                    "ttr-edu grader: %s: the cell %r has nbgrader metadata format %r (this nbgrader reads %d): set "
                    "to %d",
                    who,
                    gid,
                    meta.get("schema_version"),
                    version,
                    version,
                )
                meta["schema_version"] = version
        return nb, resources

    def _reset_flags(self, meta: dict, source: dict, who: str, gid: str) -> None:
        """Set the :data:`_FLAGS` of a submitted cell's nbgrader metadata ``meta`` to the source cell's (a flag the
        source cell lacks is removed), and log each change."""
        changed = []
        for flag in _FLAGS:
            if meta.get(flag, _ABSENT) == source.get(flag, _ABSENT):
                continue
            changed.append(f"{flag} {meta.get(flag, 'absent')!r} (the assignment's: {source.get(flag, 'absent')!r})")
            if flag in source:
                meta[flag] = source[flag]
            else:
                del meta[flag]
        if changed:
            self.log.warning(
                "ttr-edu grader: %s: the cell %r has nbgrader flags the student changed: %s; set to the assignment's",
                who,
                gid,
                ", ".join(changed),
            )


#: The nbgrader flags of a cell that the source notebook decides (nbgrader's checksum covers the first three; ``task``
#: and ``points`` decide what the cell is worth): a submission's own values are replaced by the source's.
_FLAGS = ("grade", "solution", "locked", "task", "points")
_ABSENT = object()


def _who(resources: ResourcesDict) -> str:
    info = resources.get("nbgrader", {})
    return f"{info.get('student', '?')}/{info.get('assignment', '?')}/{info.get('notebook', '?')}"


class GradeWithEngine(_CourseNotebooksOnly):
    """Grade the notebook with the ttr-edu engine and write each graded cell's verdict as its outputs."""

    instead = Execute
    enabled = Bool(
        True, help="False: nbgrader's own Execute runs every notebook in a kernel, as it does without ttr-edu"
    ).tag(config=True)

    timeout = Float(engine.DEFAULT_TIMEOUT, help="Seconds the answers of one graded cell may run.").tag(config=True)
    cells_timeout = Float(
        engine.DEFAULT_CELLS_TIMEOUT,
        help="Seconds the student's cells may run in all, over one notebook (each graded cell runs the cells above it "
        "again first; that time is not counted in `timeout`).",
    ).tag(config=True)
    memory_gb = Float(engine.DEFAULT_MEMORY_GB, help="Memory (GiB) the answers of one graded cell may add.").tag(
        config=True
    )

    require_sandbox = Bool(
        False,
        help="True (for an exam): refuse to grade, with a one-line error, where bubblewrap cannot start, instead of "
        "falling back to the process group and the audit hook (grading.md, 'Where the grader's protections hold')",
    ).tag(config=True)

    def preprocess(self, nb: NotebookNode, resources: ResourcesDict) -> tuple[NotebookNode, ResourcesDict]:
        who = _who(resources)
        try:
            source, course = _source(self.config, resources)
            report = engine.grade(
                nb,
                source,
                timeout=self.timeout,
                memory_gb=self.memory_gb,
                cells_timeout=self.cells_timeout,
                hide=[course, _exchange(self.config)],
                require_sandbox=self.require_sandbox,
            )
        except engine.SandboxUnavailable as err:  # the instructor asked for no grading without the sandbox
            self.log.error("%s", err)
            raise
        except Exception as err:  # one notebook the grader cannot read costs that notebook alone
            self.log.error("ttr-edu grader: %s could not be graded: %s: %s", who, type(err).__name__, err)
            report = engine.Report(
                [
                    engine.Verdict(notebook.grade_id(c), "", 0.0, "FAIL", f"the grader failed: {err}")
                    for c in nb.cells
                    if notebook.is_graded_check(c)
                ],
                [f"the grader failed: {type(err).__name__}: {err}"],
            )
        verdicts = {v.grade_id: v for v in report.verdicts}
        for cell in nb.cells:
            verdict = verdicts.get(notebook.grade_id(cell)) if notebook.is_graded_check(cell) else None
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
            if verdict is not None:
                cell.outputs = [_output(verdict)]
        for problem in report.problems:
            self.log.warning("ttr-edu grader: %s: %s", who, problem)
        nb.metadata["ttr_edu_grading"] = {
            "score": report.score,
            "max_score": report.max_score,
            "problems": report.problems,
            "protection": report.protection,
            "seconds": round(report.seconds, 1),
        }
        self.log.info("ttr-edu grader: %s: %g of %g in %.1f s", who, report.score, report.max_score, report.seconds)
        return nb, resources


def _output(verdict: engine.Verdict) -> NotebookNode:
    """The outputs nbgrader scores: a stdout line for a pass (full points), an error otherwise (0)."""
    from nbformat.v4 import new_output

    if verdict.status == "PASS":
        text = f"PASS {verdict.heading}" + (f" ({verdict.detail})" if verdict.detail else "") + "\n"
        return new_output("stream", name="stdout", text=text)
    if verdict.status == "not attempted":
        message = f"{verdict.heading}: not attempted (the stub still raises NotImplementedError)"
        return new_output("error", ename="NotAttempted", evalue=message, traceback=[message])
    return new_output("error", ename="CheckFailed", evalue=verdict.detail, traceback=verdict.detail.splitlines())


def use_engine(c) -> None:
    """Configure nbgrader (the ``c`` of an ``nbgrader_config.py``) to autograde ttr-edu's notebooks with the engine:
    nbgrader's default steps, with :class:`DropDuplicateIds` and :class:`GradeWithEngine` in the places of
    ``DeduplicateIds`` and ``Execute`` (each steps aside for a notebook that is not ttr-edu's)."""
    c.Autograde.sanitize_preprocessors = [
        ClearOutput,
        DropDuplicateIds,
        OverwriteKernelspec,
        OverwriteCells,
        CheckCellMetadata,
    ]
    c.Autograde.autograde_preprocessors = [
        GradeWithEngine,
        IgnorePattern,
        ClearMetadataPreprocessor,
        LimitOutput,
        SaveAutoGrades,
        AssignLatePenalties,
        CheckCellMetadata,
    ]


def _exchange(config) -> Path:
    """nbgrader's exchange folder (``c.Exchange.root``; nbgrader's default ``/srv/nbgrader/exchange``): every student's
    handed-in notebooks lie there, so the sandbox hides it like the course folder."""
    root = config.get("Exchange", {}).get("root") if hasattr(config, "get") else None
    return Path(str(root) if root else "/srv/nbgrader/exchange")
