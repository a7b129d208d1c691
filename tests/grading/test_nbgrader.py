"""The documented instructor path (grading.md): nbgrader's generate_assignment and autograde, with the course's
nbgrader configuration (`use_engine`), on a class of 20 chapter-01 submissions, hostile ones among them. Every
student is graded, each scores exactly what its answers earn (honest controls 9, 0 and 3), nothing a submission did
changes the gradebook afterwards, and `ttr-edu check` gives each the same points."""

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from tests.grading.submissions import SUBMISSIONS, submission

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = ROOT / "solutions" / "01_hebbian_memory.ipynb"
CONFIG = """c = get_config()
c.CourseDirectory.course_id = "ttr-edu"
c.CourseDirectory.db_url = "sqlite:///gradebook.db"
c.GradeWithEngine.timeout = 30

from ttr_edu.checks.grading.nbgrader import use_engine

use_engine(c)
"""


def _run(args, cwd, env, timeout=3000):
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.notebook
def test_a_class_of_20_is_graded_exactly_by_nbgrader_and_ttr_edu_check_alike(tmp_path):
    pytest.importorskip("nbgrader")
    from nbgrader.api import Gradebook

    course = tmp_path / "course"
    (course / "source" / "ch01").mkdir(parents=True)
    shutil.copy(CHAPTER, course / "source" / "ch01")
    (course / "nbgrader_config.py").write_text(CONFIG)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    env.pop("NBGRADER_EXECUTION", None)
    made = _run([sys.executable, "-m", "nbgrader", "generate_assignment", "ch01", "--force"], course, env)
    assert made.returncode == 0, made.stderr[-2000:]
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
