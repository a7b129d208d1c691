"""The documented instructor path (grading.md): nbgrader's generate_assignment and autograde.

* A bare course (an nbgrader_config.py that names no ttr-edu setting) grades ttr-edu's notebooks with the engine,
  through the nbgrader_config.py that installing ttr-edu puts on Jupyter's config path, and grades any other notebook
  in a kernel as nbgrader does.
* With the course's explicit configuration (`use_engine`), on a class of 20 chapter-01 submissions, hostile ones among
  them: every student is graded, each scores exactly what its answers earn (honest controls 9, 0 and 3), nothing a
  submission did changes the gradebook afterwards, and `ttr-edu check` gives each the same points.
"""

import copy
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from tests.grading.submissions import (
    EXPLORES_WITH_THE_PACKAGE,
    SUBMISSIONS,
    submission,
    with_cell_below,
    without_cell_ids,
)

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = ROOT / "solutions" / "01_hebbian_memory.ipynb"
CONFIG = """c = get_config()
c.CourseDirectory.course_id = "ttr-edu"
c.CourseDirectory.db_url = "sqlite:///gradebook.db"
c.GradeWithEngine.timeout = 30

from ttr_edu.checks.grading.nbgrader import use_engine

use_engine(c)
"""


#: A course's nbgrader_config.py that says nothing of ttr-edu.
BARE = """c = get_config()
c.CourseDirectory.course_id = "ttr-edu"
c.CourseDirectory.db_url = "sqlite:///gradebook.db"
c.Execute.iopub_timeout = 120
c.KernelManager.transport_encryption = "auto"
"""
#: Where installing ttr-edu puts its nbgrader_config.py: {sys.prefix}/etc/jupyter, on Jupyter's config path. The tests
#: put the checkout's copy on that path (tests/course/test_packaging.py checks that installing puts it there).
SHIPPED = ROOT / "jupyter-config"


def _run(args, cwd, env, timeout=3000):
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _env(**extra) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        **extra,
    }
    env.pop("NBGRADER_EXECUTION", None)
    return env


def _plain_notebook():
    """A notebook that is not ttr-edu's: one answer cell and one graded test cell that prints from its kernel."""
    from nbformat.v4 import new_code_cell, new_notebook

    def grading(grade_id, **flags):
        return {"nbgrader": {"grade_id": grade_id, "schema_version": 3, "task": False, "locked": False, **flags}}

    answer = "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION\n"
    test = "import os\nprint('kernel', os.getpid())\nassert double(21) == 42\n"
    cells = [
        new_code_cell(answer, metadata=grading("double", grade=False, solution=True)),
        new_code_cell(test, metadata=grading("test_double", grade=True, solution=False, locked=True, points=1)),
    ]
    return new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}})


def _released_course(tmp_path, config: str, env: dict, **others) -> Path:
    """A course folder with chapter 01 as the assignment ``ch01`` (and each notebook of ``others`` as an assignment
    of its name), generated for release by nbgrader."""
    course = tmp_path / "course"
    (course / "source" / "ch01").mkdir(parents=True)
    shutil.copy(CHAPTER, course / "source" / "ch01")
    for name, nb in others.items():
        (course / "source" / name).mkdir(parents=True)
        nbformat.write(nb, course / "source" / name / f"{name}.ipynb")
    (course / "nbgrader_config.py").write_text(config)
    for assignment in ("ch01", *others):
        made = _run([sys.executable, "-m", "nbgrader", "generate_assignment", assignment, "--force"], course, env)
        assert made.returncode == 0, made.stderr[-2000:]
    return course


@pytest.mark.slow
@pytest.mark.notebook
def test_a_bare_course_grades_ttr_edus_notebooks_with_the_engine_and_others_as_nbgrader_does(tmp_path):
    pytest.importorskip("nbgrader")
    from nbgrader.api import Gradebook

    env = _env(JUPYTER_CONFIG_PATH=str(SHIPPED))
    course = _released_course(tmp_path, BARE, env, plain=_plain_notebook())
    release = nbformat.read(course / "release" / "ch01" / CHAPTER.name, as_version=4)
    names = ["solved", "unsolved", "half", "post_run_cell forgets errors", "references replaced by a library callable"]
    for i, name in enumerate(names):
        folder = course / "submitted" / f"s{i}" / "ch01"
        folder.mkdir(parents=True)
        nbformat.write(submission(release, name), folder / CHAPTER.name)
    plain = nbformat.read(course / "release" / "plain" / "plain.ipynb", as_version=4)
    for i, body in enumerate(["return 2 * x", "return x"]):
        plain.cells[0].source = f"def double(x):\n    {body}\n"
        (course / "submitted" / f"s{i}" / "plain").mkdir(parents=True)
        nbformat.write(plain, course / "submitted" / f"s{i}" / "plain" / "plain.ipynb")
    for assignment in ("ch01", "plain"):
        graded = _run([sys.executable, "-m", "nbgrader", "autograde", assignment, "--create", "--force"], course, env)
        assert graded.returncode == 0, (graded.stdout + graded.stderr)[-3000:]
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        got = {name: gradebook.find_submission("ch01", f"s{i}").score for i, name in enumerate(names)}
        plain_scores = [gradebook.find_submission("plain", f"s{i}").score for i in range(2)]
    assert got == {name: float(SUBMISSIONS[name][2]) for name in names}
    assert [SUBMISSIONS[name][2] for name in names] == [9, 0, 3, 0, 0]
    for i in range(len(names)):  # graded by the engine: its record, and no cell ran in a kernel
        autograded = nbformat.read(course / "autograded" / f"s{i}" / "ch01" / CHAPTER.name, 4)
        assert autograded.metadata["ttr_edu_grading"]["score"] == got[names[i]]
    assert plain_scores == [1.0, 0.0]
    for i in range(2):  # nbgrader's own Execute ran it in a kernel, as without ttr-edu
        autograded = nbformat.read(course / "autograded" / f"s{i}" / "plain" / "plain.ipynb", 4)
        assert "ttr_edu_grading" not in autograded.metadata
        assert "kernel" in "".join(o.get("text", "") for o in autograded.cells[1].outputs)


@pytest.mark.slow
@pytest.mark.notebook
def test_a_class_of_20_is_graded_exactly_by_nbgrader_and_ttr_edu_check_alike(tmp_path):
    pytest.importorskip("nbgrader")
    from nbgrader.api import Gradebook

    env = _env()
    course = _released_course(tmp_path, CONFIG, env)
    release = nbformat.read(course / "release" / "ch01" / CHAPTER.name, as_version=4)
    names = list(SUBMISSIONS) + [f"solved, copy {i}" for i in range(20 - len(SUBMISSIONS))]
    students = {}
    for i, name in enumerate(names):
        students[f"s{i:02d}"] = name
        folder = course / "submitted" / f"s{i:02d}" / "ch01"
        folder.mkdir(parents=True)
        nbformat.write(
            submission(release, name.split(",")[0] if name.startswith("solved") else name), folder / CHAPTER.name
        )
    started = time.monotonic()
    graded = _run([sys.executable, "-m", "nbgrader", "autograde", "ch01", "--create", "--force"], course, env)
    seconds = time.monotonic() - started
    log = graded.stdout + graded.stderr
    assert graded.returncode == 0, log[-3000:]
    time.sleep(15)  # what a submission may have left running would have written by now
    want = {sid: SUBMISSIONS["solved" if n.startswith("solved") else n][2] for sid, n in students.items()}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        got = {sid: gradebook.find_submission("ch01", sid).score for sid in students}
    print(f"autograde: 20 notebooks in {seconds:.0f} s; scores {got}")
    assert got == {sid: float(points) for sid, points in want.items()}, {students[s]: got[s] for s in got}
    autograded = {sid: nbformat.read(course / "autograded" / sid / "ch01" / CHAPTER.name, 4) for sid in students}
    assert all(nb.metadata["ttr_edu_grading"]["score"] == want[sid] for sid, nb in autograded.items())
    assert "pasted copy" in log and "took longer than 30 s" in log  # named in the report, for the right student
    for sid, name in students.items():  # the student's own front end gives the same points
        check = _run(
            [sys.executable, "-m", "ttr_edu.course.cli", "--root", str(ROOT), "check", "--timeout", "30",
             str(course / "submitted" / sid / "ch01" / CHAPTER.name)],
            tmp_path, env, timeout=600,
        )  # fmt: skip
        points = re.search(r"^([\d.]+) of 9 points\.$", check.stdout, re.M)
        assert points and float(points.group(1)) == want[sid], (name, check.stdout[-1500:], check.stderr[-1500:])


@pytest.mark.slow
@pytest.mark.notebook
def test_a_notebook_without_its_exercise_cells_scores_nothing_under_autograde_as_under_ttr_edu_check(tmp_path):
    """``autograde`` grades against ``source/``, whose exercise cells are the solutions: a notebook whose exercise
    cells are gone (or have lost their nbgrader metadata) must not get them from there."""
    pytest.importorskip("nbgrader")
    from nbgrader.api import Gradebook

    env = _env()
    course = _released_course(tmp_path, CONFIG, env)
    release = nbformat.read(course / "release" / "ch01" / CHAPTER.name, as_version=4)
    names = {"s0": "exercise cells deleted", "s1": "exercise cells' nbgrader metadata stripped"}
    for sid, name in names.items():
        (course / "submitted" / sid / "ch01").mkdir(parents=True)
        nbformat.write(submission(release, name), course / "submitted" / sid / "ch01" / CHAPTER.name)
    graded = _run([sys.executable, "-m", "nbgrader", "autograde", "ch01", "--create", "--force"], course, env)
    assert graded.returncode == 0, (graded.stdout + graded.stderr)[-3000:]
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        got = {sid: gradebook.find_submission("ch01", sid).score for sid in names}
    assert got == {sid: 0.0 for sid in names}
    assert "is not in the notebook" in graded.stdout + graded.stderr  # the log names it, per student
    for sid, name in names.items():
        check = _run(
            [sys.executable, "-m", "ttr_edu.course.cli", "--root", str(ROOT), "check", "--timeout", "30",
             str(course / "submitted" / sid / "ch01" / CHAPTER.name)],
            tmp_path, env, timeout=600,
        )  # fmt: skip
        points = re.search(r"^([\d.]+) of 9 points\.$", check.stdout, re.M)
        assert points and float(points.group(1)) == 0, (name, check.stdout[-1500:], check.stderr[-1500:])


def test_the_sandbox_hides_nbgraders_exchange_where_every_student_hands_in(tmp_path, monkeypatch):
    """An attacker's answer walked ``/srv`` and ran a classmate's handed-in cells (9 of 9): the exchange is hidden like
    the course folder, at nbgrader's default root or the one the course configures."""
    from traitlets.config import Config

    from ttr_edu.checks.grading import engine, nbgrader

    assert nbgrader._exchange(Config()) == Path("/srv/nbgrader/exchange")
    config = Config()
    config.Exchange.root = str(tmp_path / "exchange")
    assert nbgrader._exchange(config) == tmp_path / "exchange"
    seen = {}
    # the grading modules refuse setattr (a notebook cannot change them): their namespaces are patched instead
    monkeypatch.setitem(vars(engine), "grade", lambda *a, **k: seen.update(k) or engine.Report([], [], "", 0.0))
    monkeypatch.setitem(vars(nbgrader), "_source", lambda config, resources: (None, tmp_path / "course"))
    preprocessor = nbgrader.GradeWithEngine(config=config)
    preprocessor.preprocess(nbformat.v4.new_notebook(), {"nbgrader": {"student": "s", "assignment": "a"}})
    assert seen["hide"] == [tmp_path / "course", tmp_path / "exchange"]


def _write_as_saved(nb, path: Path) -> None:
    """Write ``nb`` as it is, nbformat 4.4 without cell ids included (nbformat's writer would check it against 4.5)."""
    import json

    path.write_text(json.dumps(nb, indent=1))


@pytest.mark.slow
@pytest.mark.notebook
def test_nbgrader_metadata_a_student_edits_costs_that_notebook_alone_and_notebooks_without_ids_score_full(tmp_path):
    """A markdown cell whose nbgrader ``schema_version`` is 99 (JupyterLab's metadata editor) made nbgrader's
    CheckCellMetadata stop ``autograde`` for the whole class: it is dropped, as is a graded cell of the student's own
    making, a real cell's version is set to nbgrader's, and the student's notebook scores what its answers earn.
    Notebooks saved without cell ids (Colab, older Jupyter), one with an exploration cell that calls the package's
    own ``store``, score full marks under ``autograde`` and ``ttr-edu check`` alike."""
    pytest.importorskip("nbgrader")
    from nbformat.v4 import new_code_cell, new_markdown_cell
    from nbgrader.api import Gradebook

    env = _env()
    ch04 = nbformat.read(ROOT / "solutions" / "04_delta_rule.ipynb", as_version=4)
    course = _released_course(tmp_path, CONFIG, env, ch04=ch04)
    full04 = sum(c.metadata["nbgrader"].get("points", 0) for c in ch04.cells if "nbgrader" in c.metadata)
    hostile = copy.deepcopy(ch04)  # the solved notebook, graded first, with metadata the student edited
    hostile.cells.insert(0, new_markdown_cell("notes", metadata={"nbgrader": {"schema_version": 99}}))
    hostile.cells[4].metadata["nbgrader"]["schema_version"] = 1  # its first graded cell
    forged = {"grade": True, "solution": False, "locked": False, "grade_id": "bonus", "points": 100}
    hostile.cells.append(new_code_cell("print('bonus')", metadata={"nbgrader": {**forged, "schema_version": 3}}))
    release01 = nbformat.read(course / "release" / "ch01" / CHAPTER.name, as_version=4)
    explored = with_cell_below(submission(release01, "solved"), "ch01_store", EXPLORES_WITH_THE_PACKAGE)
    notebooks = {
        ("a_metadata", "ch04"): hostile,
        ("b_without_ids", "ch04"): without_cell_ids(ch04),
        ("b_without_ids", "ch01"): without_cell_ids(explored),
    }
    for (sid, assignment), nb in notebooks.items():
        name = CHAPTER.name if assignment == "ch01" else "ch04.ipynb"
        (course / "submitted" / sid / assignment).mkdir(parents=True)
        _write_as_saved(nb, course / "submitted" / sid / assignment / name)
    log = ""
    for assignment in ("ch04", "ch01"):
        graded = _run([sys.executable, "-m", "nbgrader", "autograde", assignment, "--create", "--force"], course, env)
        log += graded.stdout + graded.stderr
        assert graded.returncode == 0, log[-3000:]
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        got = {key: gradebook.find_submission(key[1], key[0]).score for key in notebooks}
    assert got == {("a_metadata", "ch04"): full04, ("b_without_ids", "ch04"): full04, ("b_without_ids", "ch01"): 9.0}
    who = "ttr-edu grader: a_metadata/ch04/ch04: "  # each change named, with the student, in autograde's log
    assert re.search(who + r"cell \d+ carries nbgrader metadata of no cell of the assignment \(no grade_id\)", log)
    assert re.search(who + r"cell \d+ carries nbgrader metadata of no cell of the assignment \(grade_id 'bonus'\)", log)
    assert who + "the cell 'ch04_step' has nbgrader metadata format 1 (this nbgrader reads 3)" in log, log[-3000:]
    for sid, assignment in notebooks:
        if sid != "b_without_ids":
            continue
        name = CHAPTER.name if assignment == "ch01" else "ch04.ipynb"
        check = _run(
            [sys.executable, "-m", "ttr_edu.course.cli", "--root", str(ROOT), "check", "--timeout", "60",
             str(course / "submitted" / sid / assignment / name)],
            tmp_path, env, timeout=600,
        )  # fmt: skip
        points = re.search(r"^([\d.]+) of (\d+) points\.$", check.stdout, re.M)
        want = 9 if assignment == "ch01" else full04
        assert points and float(points.group(1)) == float(points.group(2)) == want, check.stdout[-1500:]


#: A graded cell's nbgrader flags as a student may set them in JupyterLab's metadata editor (one edit per flag, each
#: on a cell where nbgrader's checksum or the cell's worth depends on it).
EDITED_FLAGS = {
    "solution": ("test_check_write", True),
    "grade": ("test_check_store", False),
    "locked": ("test_check_crosstalk_energy", False),
    "points": ("test_check_crosstalk_energy", 100),
    "task": ("test_check_recall_accuracy", True),
}


def _with_flag(nb, grade_id: str, flag: str, value):
    nb = copy.deepcopy(nb)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    cell.metadata["nbgrader"][flag] = value
    return nb


@pytest.mark.parametrize("flag", sorted(EDITED_FLAGS))
def test_a_graded_cells_flag_the_student_edited_is_set_back_to_the_sources_with_a_warning(tmp_path, flag):
    """``DropDuplicateIds`` sets each nbgrader flag of a cell the source knows back to the source cell's, so that
    nbgrader's checksum of the cell is the source's again (``OverwriteCells`` raised "Inconsistent checksums" on a
    graded cell marked ``solution``, a37e), and names the student and the cell in the log."""
    pytest.importorskip("nbgrader")
    import logging

    from nbgrader.utils import compute_checksum
    from traitlets.config import Config

    from ttr_edu.checks.grading.nbgrader import DropDuplicateIds

    (tmp_path / "source" / "ch01").mkdir(parents=True)
    shutil.copy(CHAPTER, tmp_path / "source" / "ch01")
    source = nbformat.read(CHAPTER, as_version=4)
    grade_id, value = EDITED_FLAGS[flag]
    edited = _with_flag(source, grade_id, flag, value)
    config = Config({"CourseDirectory": {"root": str(tmp_path)}})
    resources = {"nbgrader": {"assignment": "ch01", "notebook": CHAPTER.stem, "student": "s1"}}
    messages = []
    log = logging.getLogger(f"test-flags-{flag}")
    log.addHandler(type("H", (logging.Handler,), {"emit": lambda self, r: messages.append(r.getMessage())})())
    out, _ = DropDuplicateIds(config=config, log=log)(edited, resources)
    before = {c.metadata["nbgrader"]["grade_id"]: c for c in source.cells if "nbgrader" in c.metadata}
    after = {c.metadata["nbgrader"]["grade_id"]: c for c in out.cells if "nbgrader" in c.metadata}
    assert {gid: c.metadata["nbgrader"] for gid, c in after.items()} == {
        gid: c.metadata["nbgrader"] for gid, c in before.items()
    }
    assert compute_checksum(after[grade_id]) == compute_checksum(before[grade_id])
    said = [m for m in messages if "s1/ch01/" in m and repr(grade_id) in m and f"{flag} {value!r}" in m]
    assert said, messages


@pytest.mark.slow
@pytest.mark.notebook
def test_a_student_who_edits_graded_cells_flags_is_graded_as_the_answers_earn_and_autograde_succeeds(tmp_path):
    """A class of two under ``nbgrader autograde``: one student edited a flag of each kind (:data:`EDITED_FLAGS`; a
    graded cell marked ``solution`` made ``OverwriteCells`` drop that notebook and ``autograde`` exit 1, a37e), the
    other did not. Each scores what its answers earn and ``autograde`` exits 0."""
    pytest.importorskip("nbgrader")
    from nbgrader.api import Gradebook

    env = _env()
    course = _released_course(tmp_path, CONFIG, env)
    release = nbformat.read(course / "release" / "ch01" / CHAPTER.name, as_version=4)
    edited = submission(release, "half")
    for flag, (grade_id, value) in EDITED_FLAGS.items():
        edited = _with_flag(edited, grade_id, flag, value)
    for sid, nb in {"a_flags": edited, "b_classmate": submission(release, "solved")}.items():
        (course / "submitted" / sid / "ch01").mkdir(parents=True)
        nbformat.write(nb, course / "submitted" / sid / "ch01" / CHAPTER.name)
    graded = _run([sys.executable, "-m", "nbgrader", "autograde", "ch01", "--create", "--force"], course, env)
    log = graded.stdout + graded.stderr
    assert graded.returncode == 0, log[-3000:]
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        got = {sid: gradebook.find_submission("ch01", sid).score for sid in ("a_flags", "b_classmate")}
    assert got == {"a_flags": SUBMISSIONS["half"][2], "b_classmate": SUBMISSIONS["solved"][2]}, log[-3000:]
    for flag, (grade_id, _) in EDITED_FLAGS.items():
        assert re.search(rf"ttr-edu grader: a_flags/ch01/\S+: the cell '{grade_id}' has nbgrader flags .*{flag} ", log)
