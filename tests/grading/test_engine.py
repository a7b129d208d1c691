"""The grading engine on chapter 01: verdicts come from the grader's process, the answers run in a sandboxed process
of their own, and what goes wrong in one graded cell costs that cell alone. (nbgrader's path: test_nbgrader.py.)"""

import os
import shutil
import sqlite3
from pathlib import Path

import nbformat
import psutil
import pytest
import torch

from tests.grading.submissions import (
    EXPLORES_WITH_THE_PACKAGE,
    LATER_ATTACKS,
    RIGHT,
    SUBMISSIONS,
    before_everything,
    submission,
    with_cell_below,
    without_cell_ids,
)
from ttr_edu.checks.grading import _child, engine, notebook, sandbox

ROOT = Path(__file__).resolve().parents[2]
RELEASE = nbformat.read(ROOT / "chapters" / "01_hebbian_memory.ipynb", as_version=4)

pytestmark = pytest.mark.notebook


def _grade(nb, **kwargs) -> engine.Report:
    return engine.grade(nb, RELEASE, **{"timeout": 30, **kwargs})


def test_the_plan_runs_the_releases_setup_and_graded_cells_and_the_students_own_code():
    nb = submission(RELEASE, "pasted check cell")
    nb.cells[1].source = "import ttr_edu.checks._guard as g\ng.lock_down = lambda *a, **k: None"  # an edited setup cell
    plan = notebook.plan(nb, RELEASE)
    assert plan.setup == [RELEASE.cells[1].source]  # the release's, not the student's edit
    assert [u.grade_id for u in plan.units] == [
        "test_check_write", "test_check_store", "test_check_crosstalk_energy", "test_check_recall_accuracy",
        "test_check_cleanup_scores",
    ]  # fmt: skip
    assert [c.check for c in plan.units[-1].checks] == ["check_cleanup_scores", "check_rival_score_variance"]
    write = plan.units[0]  # its last copy stands below the student's own cell that defines write()
    assert plan.cells[write.upto - 1] == ("your cell 1", RIGHT["ch01_write"])
    assert any("'test_check_write' is in the notebook twice" in p for p in plan.problems)


@pytest.mark.parametrize("name", ["solved", "unsolved", "half", "honest, with a warning", "answers read the stack"])
def test_scores(name):
    report = _grade(submission(RELEASE, name))
    assert report.score == SUBMISSIONS[name][2], [(v.heading, v.status, v.detail) for v in report.verdicts]
    assert report.max_score == 9


@pytest.mark.parametrize("sandboxed", [True, False], ids=["bubblewrap", "process group only"])
@pytest.mark.parametrize("name", list(LATER_ATTACKS))
def test_later_attacks_score_nothing(name, sandboxed, monkeypatch, request):
    _sandboxed(sandboxed, monkeypatch, request)
    report = _grade(submission(RELEASE, name))
    assert report.score == LATER_ATTACKS[name][2], [(v.heading, v.status, v.detail) for v in report.verdicts]


def _sandboxed(sandboxed: bool, monkeypatch, request) -> None:
    """Grade with bubblewrap (skipped where it cannot start) or as if it were not installed."""
    if sandboxed and sandbox._bwrap() is None:
        pytest.skip("bubblewrap is not available here")
    if not sandboxed:
        which = shutil.which  # the grading modules are read-only, like the checks: hide bubblewrap from the search
        monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "bwrap" else which(name, *a, **k))
        sandbox._bwrap.cache_clear()  # it remembers its answer; asked again now, and again by the next test
        request.addfinalizer(sandbox._bwrap.cache_clear)
        assert sandbox._bwrap() is None


def test_honest_global_settings_cost_nothing_and_float32_is_named():
    answers = before_everything(
        'import warnings\nwarnings.simplefilter("always")\ntorch.set_default_device("cpu")', RIGHT
    )
    answers["ch01_store"] = "def store(keys, values):\n    return (values.T @ keys).float()"
    report = _grade(submission_with(answers))
    by_id = {v.grade_id: v for v in report.verdicts}
    assert report.score == 9, [(v.heading, v.status, v.detail) for v in report.verdicts]
    assert "your result is float32; the exercise works in float64" in by_id["test_check_store"].detail


def submission_with(answers: dict):
    nb = submission(RELEASE, "unsolved")
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell.source = answers[gid]
    return nb


#: An honest student's exploration cell that takes a while (a long sweep), of their own, graded with none.
SLOW_CELL = "import time\ntime.sleep({seconds})\nprint('swept')\n"


def test_the_students_own_slow_cell_does_not_count_against_the_answers_time():
    """The solved notebook with an 11 s cell of the student's own below 1.3, answers given 10 s: each graded cell below
    it runs it again first (1.3, 1.4, 1.5), in the notebook's budget for the student's cells, not in the answers' 10 s.
    When it counted there, every later graded cell failed with "took longer than 10 s" (a37e H1, 65 s against 60 s)."""
    nb = with_cell_below(submission(RELEASE, "solved"), "ch01_crosstalk", SLOW_CELL.format(seconds=11))
    report = _grade(nb, timeout=10)
    assert report.score == 9, [(v.grade_id, v.detail[:300]) for v in report.verdicts]


def test_when_the_students_cells_run_out_of_their_budget_the_running_cell_is_named():
    """The same 12 s cell below 1.3 with 15 s for the student's cells over the whole notebook: 1.3's process spends 12
    of them; 1.4's and 1.5's get at least the answers' 10 s, which the cell outlasts. Those two graded cells fail with
    a message naming the cell that was running and the budget; the cells above it score."""
    nb = with_cell_below(submission(RELEASE, "solved"), "ch01_crosstalk", SLOW_CELL.format(seconds=12))
    report = _grade(nb, timeout=10, cells_timeout=15)
    by_id = {v.grade_id: v for v in report.verdicts}
    assert report.score == 4, [(v.grade_id, v.detail[:300]) for v in report.verdicts]
    for gid in ("test_check_recall_accuracy", "test_check_cleanup_scores"):
        detail = by_id[gid].detail
        assert "your cell 1 was still running when the time for your own cells ran out" in detail, detail
        assert "share 15 s" in detail, detail
    assert any("your cell 1 was still running" in p for p in report.problems), report.problems
    with pytest.raises(ValueError, match="cells_timeout"):
        _grade(nb, cells_timeout=float("nan"))


def test_a_timeout_or_a_dead_process_costs_that_cell_alone():
    report = _grade(submission(RELEASE, "infinite loop in 1.1"), timeout=5)
    first = report.verdicts[0]
    assert report.score == 8 and first.status == "FAIL" and "took longer than 5 s" in first.detail
    assert any("took longer than 5 s" in p for p in report.problems)
    report = _grade(submission(RELEASE, "os._exit in 1.1"))
    assert report.score == 8 and "does your code call os._exit" in report.verdicts[0].detail


def test_memory_is_limited_per_graded_cell():
    hog = "def write(W, k, v):\n    blocks = [torch.ones(1 << 27) for _ in range(64)]  # 32 GiB\n    return W"
    report = _grade(submission_with({**RIGHT, "ch01_write": hog}), memory_gb=1)
    assert report.score == 8 and "memory" in report.verdicts[0].detail.lower(), report.verdicts[0].detail


@pytest.mark.parametrize("sandboxed", [True, False], ids=["bubblewrap", "process group only"])
def test_the_answers_cannot_write_the_course_folder_or_outlive_the_grading(tmp_path, monkeypatch, request, sandboxed):
    _sandboxed(sandboxed, monkeypatch, request)
    course = tmp_path / "course"
    course.mkdir()
    gradebook = course / "gradebook.db"
    with sqlite3.connect(gradebook) as db:
        db.execute("CREATE TABLE grade (score REAL)")
    before = gradebook.read_bytes()
    marker = f"ttr-edu-test-{os.getpid()}-{sandboxed}"
    nasty = (
        f"import os, pathlib, subprocess, sys, threading, time\n"
        f"for attempt in (lambda: subprocess.Popen(['sleep', '300', {marker!r}], start_new_session=True),\n"
        f"                lambda: os.fork(),\n"
        f"                lambda: pathlib.Path({str(gradebook)!r}).write_text('gone'),\n"
        f"                lambda: os.kill(os.getppid(), 9),\n"
        f"                lambda: open(os.path.expanduser('~/.bashrc'), 'a').write('x')):\n"
        f"    try:\n        attempt()\n    except Exception:\n        pass\n"
        f"threading.Thread(target=time.sleep, args=(300,), daemon=False).start()\n"
    )
    report = _grade(submission_with({**RIGHT, "ch01_write": nasty + "\n\n" + RIGHT["ch01_write"]}), hide=[course])
    assert report.score == 9, [(v.heading, v.status, v.detail) for v in report.verdicts]
    assert gradebook.read_bytes() == before
    left = [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]
    assert left == []
    assert report.protection == sandbox.protection()


def test_the_course_folder_stays_hidden_when_it_is_on_the_graders_path(tmp_path, monkeypatch):
    """nbgrader puts the course folder on ``sys.path`` (it loads the course's config from there); the sandbox must
    not bind it back, or an answer could read ``source/``, a classmate's ``submitted/`` or the gradebook."""
    if sandbox._bwrap() is None:
        pytest.skip("bubblewrap is not available here")
    course = tmp_path / "course"
    (course / "source").mkdir(parents=True)
    secret = course / "source" / "solutions.txt"
    secret.write_text("the instructor's answers")
    monkeypatch.syspath_prepend(str(course))
    peek = (
        f"import pathlib\ntry:\n    SEEN = pathlib.Path({str(secret)!r}).read_text()\nexcept OSError:\n    SEEN = ''\n"
        "def write(W, k, v):\n    return W if SEEN else W + torch.outer(v, k)\n"
    )
    report = _grade(submission_with({**RIGHT, "ch01_write": peek}), hide=[course])
    assert report.score == 9, [(v.heading, v.status, v.detail) for v in report.verdicts]
    assert all(course not in p.parents and p != course for p in sandbox._needed())


def test_hidden_tests_of_the_source_count():
    """An instructor's hidden test in a graded cell of the source notebook runs after the check: an answer that passes
    the visible cases but not the hidden one scores 0 for that cell."""
    import copy

    source = copy.deepcopy(RELEASE)
    graded = next(c for c in source.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_check_write")
    graded.source += (
        "\n### BEGIN HIDDEN TESTS\nI = torch.eye(2, dtype=torch.float64)\n"
        "assert torch.equal(write(0 * I, I[0], I[1]), torch.outer(I[1], I[0])), 'a 2 × 2 case'\n### END HIDDEN TESTS\n"
    )
    special = "def write(W, k, v):\n    if W.shape == (2, 2):\n        return W\n    return W + torch.outer(v, k)"
    report = engine.grade(submission_with({**RIGHT, "ch01_write": special}), source, timeout=30)
    first = report.verdicts[0]
    assert report.score == 8 and first.status == "FAIL" and "hidden tests: AssertionError (line 2)" in first.detail
    assert "2 × 2" not in first.detail  # the hidden test's own text never reaches the student
    assert engine.grade(submission(RELEASE, "solved"), source, timeout=30).score == 9
    forged = special + (  # a "hidden tests passed" report, written to the report pipe before they are sent
        "\nimport json, os, struct, sys\n_f = sys._getframe()\n"
        "while _f is not None and 'results' not in _f.f_locals:\n    _f = _f.f_back\n"
        "_h = json.dumps({'type': 'hidden', 'error': None}).encode()\n"
        "os.write(_f.f_locals['results'], struct.pack('>II', len(_h), 0) + _h)\n"
    )
    report = engine.grade(submission_with({**RIGHT, "ch01_write": forged}), source, timeout=30)
    assert report.score == 0  # the cell runs again before every later graded cell: each report is forged
    assert "a hidden tests' verdict before the hidden tests were sent" in report.verdicts[0].detail


def _serve(tmp_path, answer_cell: str, check_name: str, module=None, expression="prefix_sum"):
    """One graded cell of a small exercise of tests/checks/test_rules.py (or of ``module``, a module of
    ttr_edu.checks) through the fork server (no sandbox): what the grader's process hears, and its verdict."""
    from tests.checks import test_rules
    from ttr_edu.checks._rules import has_fresh
    from ttr_edu.checks.grading import _child
    from ttr_edu.checks.grading.notebook import Check

    declared = getattr(module or test_rules, check_name).__exercise__
    frames = tmp_path / "frames"
    out = os.open(frames, os.O_WRONLY | os.O_CREAT)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    job = {"cells": [["answer", answer_cell]], "timeout": 60, "memory_bytes": 1 << 30, "hidden": ""}
    job["_cases"] = {check_name: list(declared.cases())}
    job["_fresh"] = [check_name] if has_fresh(declared) else []  # as the fork server offers, and the grader asks
    unit = {"grade_id": "test", "checks": [{"check": check_name, "expression": expression}], "upto": 1}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the fork server runs: one intra-op thread, so the fork can use torch safely
    try:
        _child._serve_unit(out, job, 0, {**unit, "hidden": ""}, {}, {check_name: declared}, scratch)
    finally:
        torch.set_num_threads(threads)
        os.close(out)
    reader, heard = _child.FrameReader(), engine._Heard()
    reader.feed(frames.read_bytes())
    for header, payload in reader.frames():
        engine._note(heard, header, payload, {check_name})
    check = Check(module.__name__.rsplit(".", 1)[-1] if module else "test_rules", check_name, expression)
    return heard, engine._judge_check(check, declared, heard, 60)


@pytest.mark.parametrize(
    "answer,verdict",
    [
        ("import torch\n\ndef prefix_sum(x):\n    return torch.cumsum(x, dim=0)", "PASS"),
        ("import torch\n\ndef prefix_sum(x):\n    return torch.ones(len(x), len(x), dtype=x.dtype).tril() @ x", "T^1."),
        (
            "import torch\n\ndef prefix_sum(x):\n    return torch.stack([x[: t + 1].sum(0) for t in range(len(x))])",
            "T^1.",
        ),
    ],
    ids=["linear", "T × T", "every prefix summed"],
)
def test_the_work_of_an_answer_is_counted_in_its_process_and_judged_by_the_grader(tmp_path, answer, verdict):
    heard, (status, detail) = _serve(tmp_path, answer, "check_counted_prefix_sum")
    assert {size for _, _, size in heard.work} == {64, 256}, (heard.status, detail)
    assert all(isinstance(outcome.work, int) for outcome, _ in heard.work.values())
    if verdict == "PASS":
        assert status == "PASS", detail
    else:
        assert status == "FAIL" and f"grows like {verdict}" in detail, detail


@pytest.mark.parametrize(
    "answer,verdict",
    [
        ("import torch\n\ndef prefix_sum(x):\n    return torch.cumsum(x, dim=0)", "PASS"),
        (
            "import torch\n\ndef prefix_sum(x):\n    out = x[:0]\n    for s in range(0, len(x), 16):\n"
            "        out = torch.cat([out, x[s : s + 16].cumsum(0) + (out[-1] if len(out) else 0)])\n    return out",
            "grows faster than T",
        ),
    ],
    ids=["linear", "output grown by torch.cat"],
)
def test_the_grader_judges_exact_linearity_as_the_kernel_check_does(tmp_path, answer, verdict):
    heard, (status, detail) = _serve(tmp_path, answer, "check_exactly_linear_prefix_sum")
    assert {size for _, _, size in heard.work} == {64, 128, 256}, (heard.status, detail)
    if verdict == "PASS":
        assert status == "PASS", detail
    else:
        assert status == "FAIL" and verdict in detail, detail


def test_an_answer_that_replays_its_first_output_for_a_shape_fails_the_case_drawn_afresh(tmp_path):
    """An answer that keeps its first output for each input shape and returns it again: every public case is called
    once per shape, so all pass; the case drawn after the fork has a public case's shape and new values, and the
    grader judges what the answer gave there."""
    replayed = (
        "import torch\n_seen = {}\n\ndef prefix_sum(x):\n    return _seen.setdefault(x.shape, torch.cumsum(x, dim=0))"
    )
    heard, (status, detail) = _serve(tmp_path, replayed, "check_counted_prefix_sum")
    assert len(heard.fresh.get("check_counted_prefix_sum", [])) == 1, (heard.status, detail)
    assert status == "FAIL" and "wrong values" in detail and "drawn afresh for grading" in detail, detail


@pytest.mark.parametrize("sandboxed", [True, False], ids=["bubblewrap", "process group only"])
def test_no_folder_is_listed_or_opened_outside_the_scratch_folder_and_the_import_path(
    tmp_path, monkeypatch, request, sandboxed
):
    """Without bubblewrap the audit hook is all that keeps the course folder out of reach: a folder handle would open
    files relative to it (unaudited), and a listing shows what is there."""
    _sandboxed(sandboxed, monkeypatch, request)
    course = tmp_path / "course"
    (course / "source").mkdir(parents=True)
    (course / "source" / "solutions.txt").write_text("the instructor's answers")
    peek = (
        "import glob, os\nSEEN = []\n"
        f"for attempt in (lambda: os.listdir({str(course)!r}), lambda: list(os.scandir({str(course / 'source')!r})),\n"
        f"                lambda: glob.glob({str(course)!r} + '/*/*'), lambda: os.listdir('/proc'),\n"
        f"                lambda: os.read(os.open('solutions.txt', os.O_RDONLY,\n"
        f"                                        dir_fd=os.open({str(course / 'source')!r}, os.O_RDONLY)), 99),\n"
        f"                lambda: os.open({str(course)!r}, os.O_RDONLY | os.O_DIRECTORY),\n"
        "                lambda: open('../../../../../../../proc/1/environ').read()):\n"
        "    try:\n        SEEN.append(attempt())\n    except Exception:\n        pass\n"
        "SEEN = [s for s in SEEN if s]\n\n\n"
        "def write(W, k, v):\n    return W if SEEN else W + torch.outer(v, k)\n"
    )
    report = _grade(submission_with({**RIGHT, "ch01_write": peek}), hide=[course])
    assert report.score == 9, [(v.heading, v.status, v.detail) for v in report.verdicts]


@pytest.mark.parametrize("sandboxed", [True, False], ids=["bubblewrap", "process group only"])
def test_pidfd_signals_are_removed_before_the_answer_runs(monkeypatch, request, sandboxed):
    """``os.pidfd_open`` and ``signal.pidfd_send_signal`` raise no audit event a hook could refuse: they are removed,
    so an answer cannot stop the process that grades the later cells. The cell that calls them stops there (the
    removed function raises in a student's cell): what it would have defined is missing, and the answer that needs it
    fails naming the call; every later graded cell is graded."""
    _sandboxed(sandboxed, monkeypatch, request)
    kill = (
        "import os, signal\n"
        "signal.pidfd_send_signal(os.pidfd_open(os.getppid()), signal.SIGKILL)\n\n\n" + RIGHT["ch01_write"]
    )
    report = _grade(submission_with({**RIGHT, "ch01_write": kill}))  # its cell runs above every graded cell
    assert [v.status for v in report.verdicts] == ["FAIL"] + ["PASS"] * 4, report.verdicts
    assert report.score == 8
    assert "signal processes (os.pidfd_open)" in report.verdicts[0].detail, report.verdicts[0].detail


def test_require_sandbox_refuses_to_grade_without_bubblewrap(monkeypatch, request):
    _sandboxed(False, monkeypatch, request)
    with pytest.raises(engine.SandboxUnavailable, match="require_sandbox is set and bubblewrap cannot start"):
        _grade(submission(RELEASE, "solved"), require_sandbox=True)


def test_the_operation_count_rule_is_judged_by_the_grader():
    """1.2's text asks for one matrix product, no loop over the pairs: a loop gives the right values and is refused
    by the count of torch operations, in the grader as in the check in the kernel."""
    looped = "def store(keys, values):\n    return sum(torch.outer(v, k) for k, v in zip(keys, values))\n"
    nb = submission(RELEASE, "solved")
    for cell in nb.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "ch01_store":
            cell.source = looped
    report = _grade(nb)
    verdicts = {v.heading: v for v in report.verdicts}
    store = next(v for heading, v in verdicts.items() if "store" in heading)
    assert store.status == "FAIL" and "torch operations" in store.detail, (store.status, store.detail)
    assert all(v.status == "PASS" for v in report.verdicts if v is not store)


#: Answers that call another of the package's functions computing the same thing as the exercise's reference: 1.1's
#: write through ``hebbian.store`` of one pair, 1.2's store through ``hebbian.recall`` (a read, given the keys as the
#: memory), 1.3's energy through the batched ``hebbian.crosstalk_energies``. None is the reference its exercise names,
#: so each scored its points before the allow-list.
BY_ANOTHER_PACKAGE_FUNCTION = {
    "ch01_write": "def write(W, k, v):\n    return W + hebbian.store(k[None], v[None])\n",
    "ch01_store": "def store(keys, values):\n    return hebbian.recall(keys.T, values.T)  # values.T @ keys\n",
    "ch01_crosstalk": "from ttr_edu.hebbian import crosstalk_energies as _batched\n\n\n"
    "def crosstalk_energy(keys):\n    return _batched(keys[None])[0]\n",
}


@pytest.mark.parametrize("sandboxed", [True, False], ids=["bubblewrap", "process group only"])
def test_another_package_function_that_computes_the_answer_is_not_given(monkeypatch, request, sandboxed):
    """The exercise gives the answer none of the package's functions (chapter 01 gives none): every function of the
    package other than the harness is emptied before the answer runs, so an answer that calls one, however it bound
    it, ends with the allow-list's message and scores nothing; the rest of the notebook still scores."""
    _sandboxed(sandboxed, monkeypatch, request)
    report = _grade(submission_with({**RIGHT, **BY_ANOTHER_PACKAGE_FUNCTION}))
    verdicts = {v.grade_id: v for v in report.verdicts}
    names = {
        "test_check_write": "ttr_edu.hebbian.store",
        "test_check_store": "ttr_edu.hebbian.recall",
        "test_check_crosstalk_energy": "ttr_edu.hebbian.crosstalk_energies",
    }
    for grade_id, name in names.items():
        assert verdicts[grade_id].status == "FAIL", (grade_id, verdicts[grade_id].detail)
        assert f"the exercise asks you to write this yourself; {name} is not given to this exercise" in (
            verdicts[grade_id].detail
        ), verdicts[grade_id].detail
    assert report.score == 9 - 4, [(v.heading, v.status, v.detail) for v in report.verdicts]


def test_hidden_tests_may_use_what_the_setup_cells_computed_but_call_only_what_is_given():
    """Hidden tests run after the lock-down: one that calls a package function the cell's exercise does not give ends
    the process with the allow-list's message (the cell scores 0), one that compares with values a setup cell of the
    source computed before the lock-down passes."""
    import copy

    def source_with(setup: str, hidden: str):
        source = copy.deepcopy(RELEASE)
        source.cells[1].source += "\n" + setup
        graded = next(c for c in source.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_check_write")
        graded.source += f"\n### BEGIN HIDDEN TESTS\n{hidden}\n### END HIDDEN TESTS\n"
        return source

    eye = "I = torch.eye(2, dtype=torch.float64)\n"
    calls = source_with("", eye + "assert torch.equal(write(0 * I, I[0], I[1]), hebbian.store(I[:1], I[1:]))")
    report = engine.grade(submission(RELEASE, "solved"), calls, timeout=30)
    first = report.verdicts[0]
    assert report.score == 8 and first.status == "FAIL", (first.status, first.detail)
    # once the hidden tests are in its memory, the answers' process may pass on nothing but their verdict (a rule's
    # message could carry their text), so the cell fails with the generic line
    assert "as if it broke a rule" in first.detail, first.detail
    computed = source_with(
        eye + "EXPECTED = hebbian.store(I[:1], I[1:])", "assert torch.equal(write(0 * I, I[0], I[1]), EXPECTED)"
    )
    assert engine.grade(submission(RELEASE, "solved"), computed, timeout=30).score == 9


SOURCE = nbformat.read(ROOT / "solutions" / "01_hebbian_memory.ipynb", as_version=4)


@pytest.mark.parametrize("name", ["exercise cells deleted", "exercise cells' nbgrader metadata stripped"])
def test_a_missing_exercise_cell_is_not_attempted_and_never_the_sources_solution(name):
    """nbgrader grades against ``source/``, whose exercise cells are the solutions: a notebook without its exercise
    cells scores nothing there, as ``ttr-edu check`` (against the release) says."""
    nb = submission(RELEASE, name)
    for report in (engine.grade(nb, SOURCE, timeout=30), _grade(nb)):
        assert report.score == 0, [(v.heading, v.status, v.detail) for v in report.verdicts]
        assert [v.status for v in report.verdicts] == ["not attempted"] * 5, [v.detail for v in report.verdicts]
        assert "'ch01_write' is not in your notebook" in report.verdicts[0].detail
        assert sum("is not in the notebook" in p for p in report.problems) == 5


#: Walks every frame above the answer (the fork server's among them: job, the graded cells, their cases) and what
#: Python keeps of the cells run (linecache): whatever of the grader's secrets is within the answer's reach.
_PROBE = """import linecache, os, sys
import torch

_MARKERS = tuple("HIDDEN-" + m for m in ("MARKER-WRITE", "MARKER-STORE"))


def _reachable(own):
    found, seen, mine = set(), set(), id(globals())

    def walk(value, depth):
        if id(value) in seen or id(value) == mine or depth > 10:
            return
        seen.add(id(value))
        if isinstance(value, str):
            found.update(m for m in _MARKERS if m in value)
        elif isinstance(value, dict):
            others = [k for k in value if isinstance(k, str) and k.startswith("check_") and k != own]
            found.update(f"the cases of {k}" for k in others)
            for key, item in list(value.items()):
                walk(key, depth + 1)
                walk(item, depth + 1)
        elif isinstance(value, (list, tuple, set, frozenset)):
            for item in list(value):
                walk(item, depth + 1)

    frame = sys._getframe(1)
    while frame is not None:
        walk(dict(frame.f_locals), 0)
        frame = frame.f_back
    walk(dict(linecache.cache), 0)
    return found


def write(W, k, v):
    found = _reachable("check_write")
    if found:
        raise RuntimeError(f"within reach: {sorted(found)}")
    if LEAVE:
        try:
            torch.save(torch.ones(1), "/dev/ttr-edu-left-by-1.1")
        except Exception:
            pass
    return W + torch.outer(v, k)
"""
_PROBE_STORE = """def store(keys, values):
    found = _reachable("check_store")
    if LEAVE and os.path.exists("/dev/ttr-edu-left-by-1.1"):
        found.add("a file 1.1's process left in /dev")
    if found:
        raise RuntimeError(f"within reach: {sorted(found)}")
    return values.T @ keys
"""


@pytest.mark.parametrize("sandboxed", [True, False], ids=["bubblewrap", "process group only"])
def test_a_graded_cells_answers_reach_no_hidden_test_no_other_cells_cases_and_leave_nothing(
    sandboxed, monkeypatch, request
):
    """Right after the fork the child drops every hidden test and the other graded cells' cases and exercises; its
    own hidden tests arrive once its answers have reported. Inside bubblewrap, /dev is read-only."""
    import copy

    _sandboxed(sandboxed, monkeypatch, request)
    source = copy.deepcopy(RELEASE)
    for cell in source.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in ("test_check_write", "test_check_store"):
            marker = "HIDDEN-" + ("MARKER-WRITE" if gid == "test_check_write" else "MARKER-STORE")
            cell.source += f"\n### BEGIN HIDDEN TESTS\nassert 1 + 1 == 2  # {marker}\n### END HIDDEN TESTS\n"
    probe = _PROBE.replace("if LEAVE", f"if {sandboxed}")  # no bubblewrap: never write the machine's /dev
    answers = {**RIGHT, "ch01_write": probe, "ch01_store": _PROBE_STORE.replace("if LEAVE", f"if {sandboxed}")}
    report = engine.grade(submission_with(answers), source, timeout=30)
    text = repr([(v.status, v.detail) for v in report.verdicts] + report.problems)
    assert "MARKER" not in text and report.score == 9, text


#: a submission's helper: an outcome frame for case 0 of check_write, written to every pipe the answer's process holds
#: (the results pipe among them), ahead of the harness's own report
_SEND_REPORT = """

def _send(payload):
    head = json.dumps({"type": "outcome", "check": "check_write", "case": 0}).encode()
    frame = struct.pack(">II", len(head), len(payload)) + head + payload
    for fd in range(3, 64):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, frame)
        except OSError:
            pass
"""


_COMPRESSED_REPORT = (
    '''import io, json, os, stat, struct, zipfile
import torch

_calls = []


def write(W, k, v):
    """Reports case 0 right in a compressed torch.save archive of its own, then answers it wrong."""
    right = W + torch.outer(v, k)
    _calls.append(1)
    if len(_calls) > 1:
        return right
    plain, packed = io.BytesIO(), io.BytesIO()
    torch.save({"result": right.clone(), "inputs_after": {"W": W.clone(), "k": k.clone(), "v": v.clone()}}, plain)
    with zipfile.ZipFile(io.BytesIO(plain.getvalue())) as src, zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as z:
        for info in src.infolist():
            z.writestr(info.filename, src.read(info.filename))
    _send(packed.getvalue())
    return W
'''
    + _SEND_REPORT
)


def test_a_compressed_report_is_refused_before_it_is_inflated():
    """torch.save never compresses: a compressed archive (a few hundred kB of deflated zeros would take gigabytes of
    the grader's memory once inflated) is refused unread, and the graded cell fails."""
    import io
    import zipfile

    report = _grade(submission_with({**RIGHT, "ch01_write": _COMPRESSED_REPORT}))
    first = report.verdicts[0]
    assert report.score == 8 and "compressed" in first.detail, (first.status, first.detail)  # 9 when inflated
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data/0", b"\0" * (_child.MAX_FRAME + 1))
    assert len(bomb.getvalue()) < _child.MAX_FRAME // 100
    with pytest.raises(ValueError, match="compressed"):
        engine._load(bomb.getvalue())
    stored = io.BytesIO()
    with zipfile.ZipFile(stored, "w") as z:
        z.writestr("archive/data/0", b"\0" * 16)
    packed = bytearray(stored.getvalue())  # a central directory that says more than the archive holds
    packed[packed.rfind(b"PK\x01\x02") + 24 : packed.rfind(b"PK\x01\x02") + 28] = (_child.MAX_FRAME + 1).to_bytes(
        4, "little"
    )
    with pytest.raises(ValueError):
        engine._load(bytes(packed))


_MEMO_BOMB_REPORT = '''import io, json, os, stat, struct
import torch

_calls = []


def write(W, k, v):
    """Reports case 0 as one 1000-item list referenced {refs} times (pickle's memo: a few bytes per reference), then
    answers right."""
    _calls.append(1)
    if len(_calls) == 1:
        inner, buffer = [0] * 1000, io.BytesIO()
        torch.save({{"result": [inner] * {refs}}}, buffer)
        _send(buffer.getvalue())
    return W + torch.outer(v, k)
'''


def _memo_bomb(refs: int, inner: int = 1000) -> bytes:
    import io

    buffer, shared = io.BytesIO(), [0] * inner
    torch.save({"result": [shared] * refs}, buffer)
    return buffer.getvalue()


def test_a_report_holding_one_list_many_times_costs_that_cell_and_not_the_grader():
    """``torch.load`` keeps pickle's memo: 40 kB holding one 1000-item list 20,000 times once cost the grader 17 s and
    a gigabyte to expand (hours for a 64 MiB frame: the whole class waited). The report is refused when read, in
    CPU time bounded by its size, and the graded cell that sent it fails; its other cells keep their points."""
    import time

    report = _grade(submission_with({**RIGHT, "ch01_write": _MEMO_BOMB_REPORT.format(refs=20_000) + _SEND_REPORT}))
    first = report.verdicts[0]
    assert report.score == 8 and first.status == "FAIL", (first.status, first.detail)
    assert "several places" in first.detail, first.detail
    payload = _memo_bomb(400_000)  # 800 kB of references: 4·10⁸ items once expanded
    # the grader's own CPU time, which other processes do not inflate (wall-clock time under a loaded machine passed
    # 5 s once): refused at about 1 s here, where walking the expanded items would take minutes
    started = time.process_time()
    with pytest.raises(ValueError, match="more than"):
        engine._load(payload)
    with pytest.raises(ValueError, match="several places"):
        engine._load(_memo_bomb(10_000, inner=2))
    assert time.process_time() - started < 5.0


def test_a_report_is_read_only_within_its_bounds():
    """The bounded walk (:func:`ttr_edu.checks._rules.plain_size`) refuses a report that is too large, too deep, or
    that holds a container twice; the largest honest record of the solved chapters (13's staged record, a few hundred
    items, 5 levels) is far inside."""
    import io

    from ttr_edu.checks import _rules

    def saved(value) -> bytes:
        buffer = io.BytesIO()
        torch.save(value, buffer)
        return buffer.getvalue()

    deep: list = []
    for _ in range(_rules.PLAIN_DEPTH + 1):
        deep = [deep]
    with pytest.raises(ValueError, match="deeper"):
        engine._load(saved({"result": deep}))
    with pytest.raises(ValueError, match="deeper"):
        _rules.from_plain(deep)
    with pytest.raises(ValueError, match="items"):
        engine._load(saved({"result": [[i] for i in range(_rules.PLAIN_ITEMS)]}))
    with pytest.raises(ValueError, match="structure"):
        engine._load(saved({"result": list(range(engine.MAX_PICKLE))}))
    t = torch.ones(3)
    honest = {"result": (t, [t.clone(), 1.5, "x", ()], ()), "inputs_after": {"W": t.clone()}, "raised": None}
    assert _rules.outcome_of(engine._load(saved(honest))).result[1][1] == 1.5
    assert _rules.plain_size([(), (), {"a": "a"}, "a"]) == (7, 2)


# An interpreter started by ``_posixsubprocess.fork_exec`` (no audit event) has no lock-down: it could compute any
# answer (an attacker scored an unsolved notebook 9 of 9). The call below is Python 3.11's and 3.12's signature.
START_TRUE = (
    "import _posixsubprocess, os\n"
    "def _start_true():\n"
    "    r, w = os.pipe()\n"
    "    pid = _posixsubprocess.fork_exec([b'/bin/true'], [b'/bin/true'], True, (), None, None,\n"
    "        -1, -1, -1, -1, -1, -1, r, w, True, True, -1, None, None, None, -1, None, False)\n"
    "    os.waitpid(pid, 0)\n"
)


@pytest.mark.parametrize("sandboxed", [True, False], ids=["bubblewrap", "process group only"])
def test_an_answer_cannot_start_a_process_even_below_the_audit_hook(monkeypatch, request, sandboxed):
    namespace: dict = {}
    exec(START_TRUE, namespace)
    namespace["_start_true"]()  # here, outside the grader, the call starts a process: the test can fail
    _sandboxed(sandboxed, monkeypatch, request)
    right = RIGHT["ch01_write"].replace("def write(", "def _right_write(")
    answer = (  # right only where it could start a process
        START_TRUE + right + "\n\ndef write(W, k, v):\n    try:\n        _start_true()\n    except OSError:\n"
        "        return W\n    return _right_write(W, k, v)\n"
    )
    report = _grade(submission_with({**RIGHT, "ch01_write": answer}))
    by_id = {v.grade_id: v for v in report.verdicts}
    assert by_id["test_check_write"].status == "FAIL" and report.score == 8, [
        (v.heading, v.status, v.detail) for v in report.verdicts
    ]


def test_the_filter_refuses_every_way_of_starting_a_process_and_keeps_threads():
    import subprocess
    import sys

    script = (
        "import os, subprocess, multiprocessing, threading, torch\n"
        "from ttr_edu.checks.grading._no_processes import forbid_new_processes\n"
        "assert forbid_new_processes() is None\n"
        "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
        "torch.ones(256, 256) @ torch.ones(256, 256)\n"
        "for attempt in (os.fork, lambda: subprocess.run(['true']),\n"
        "                lambda: os.posix_spawn('/bin/true', ['true'], {}),\n"
        "                lambda: multiprocessing.get_context('spawn').Process(target=print).start(),\n"
        "                lambda: os.execv('/bin/true', ['true'])):\n"
        "    try:\n        attempt()\n    except PermissionError:\n        continue\n"
        "    raise SystemExit('started a process')\n"
        "print('refused')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "refused", done.stderr


def test_the_fork_server_hides_its_memory_from_processes_of_its_user():
    """An attacker's answer, once past the audit hook, rewrote the hidden tests in the fork server's memory through
    /proc/<pid>/mem: the fork server is made not dumpable (its /proc files then belong to root)."""
    import subprocess
    import sys

    script = (
        "import ctypes\nfrom ttr_edu.checks.grading._no_processes import hide_memory\n"
        "libc = ctypes.CDLL(None)\nbefore = libc.prctl(3, 0, 0, 0, 0)\n"  # PR_GET_DUMPABLE
        "assert hide_memory() is None\nprint(before, libc.prctl(3, 0, 0, 0, 0))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.split() == ["1", "0"], done.stderr
    assert "hide_memory()" in Path(_child.__file__).read_text().split("def main(")[1]  # called by the fork server


def test_a_solved_cell_under_a_time_magic_keeps_its_point():
    """An honest ``%%time`` over the solved 1.1 cell lost its point: the grader's stand-in shell skipped the cell's
    code, so ``write`` was never defined (an attacker's finding)."""
    report = _grade(submission_with({**RIGHT, "ch01_write": "%%time\n" + RIGHT["ch01_write"]}))
    assert report.score == 9, [(v.heading, v.status, v.detail) for v in report.verdicts]


def test_a_table_of_the_public_cases_answers_scores_nothing():
    """a37b's B5: a table of the package's outputs on every public case (solves nothing) scored 9 of 9. The grader
    now also asks each answer for one case drawn after the answers' process was forked (the check's own generator,
    reseeded with a secret), so the table scores 0; with the fresh cases off (fresh_cases=0, as before) it scores
    the points of every exercise without a counted rule (the inputs of an operation count are drawn afresh whatever
    ``fresh_cases`` says, so 1.2 and 1.5 fail there), and the honest solved notebook keeps its 9 with them on."""
    from tests.grading.submissions import lookup_table

    table = submission_with(lookup_table())
    # the default of one fresh case per check: once, a table's default 0.0 matched 1.4's fresh case (a correlated-keys
    # case where nothing is recalled, accuracy 0.0, as in a public case); a number-answered exercise's fresh case is now
    # one whose answer no public case has (grading.md)
    report = _grade(table)
    assert report.score == 0, [(v.heading, v.status, v.detail) for v in report.verdicts]
    assert all("drawn afresh for grading" in v.detail for v in report.verdicts), [v.detail for v in report.verdicts]
    off = _grade(table, fresh_cases=0)  # the table does pass every public case
    failed = {v.grade_id for v in off.verdicts if v.status != "PASS"}
    assert failed == {"test_check_store", "test_check_cleanup_scores"}, [(v.grade_id, v.detail) for v in off.verdicts]
    assert off.score == 9 - 1 - 3  # 1.2 is worth 1 point, the cell of 1.5 and 1.6 3
    assert _grade(submission(RELEASE, "solved")).score == 9


#: a37d's A2: 1.2's "no Python loop" answered by a loop on every input but the loop rule's two public inputs
#: (``_store_at(4)``, ``_store_at(32)``: seeded, so the cell rebuilds them), whose results it returns from a table
#: after one ``torch.equal``: its operation count stayed flat and it scored 1.2's point.
LOOP_AND_TABLE = """import torch

def _loop_store(keys, values):
    W = torch.zeros(values.shape[1], keys.shape[1], dtype=keys.dtype)
    for i in range(keys.shape[0]):
        W = W + torch.outer(values[i], keys[i])
    return W

_TABLE = []
for _n in (4, 32):
    _g = torch.Generator().manual_seed(_n)
    _k = torch.randn(_n, 6, generator=_g, dtype=torch.float64)
    _v = torch.randn(_n, 5, generator=_g, dtype=torch.float64)
    _TABLE.append((_k, _loop_store(_k, _v)))


def store(keys, values):
    for k0, W0 in _TABLE:
        if keys.shape == k0.shape and keys.dtype == k0.dtype and torch.equal(keys, k0):
            return W0.clone()
    return _loop_store(keys, values)
"""


def test_a_table_of_the_operation_count_rules_inputs_scores_nothing():
    """The counted rule's inputs are drawn afresh by the fork server after the fork (the rule's own ``case(n)``
    reseeded with a secret, rebuilt here from it), one call at a time: the table above holds none of them, the loop
    runs at both sizes and its count grows, so 1.2 fails on the loop rule; every other answer keeps its point."""
    report = _grade(submission_with({**RIGHT, "ch01_store": LOOP_AND_TABLE}))
    store = next(v for v in report.verdicts if v.grade_id == "test_check_store")
    assert store.status == "FAIL" and "torch operations" in store.detail, (store.status, store.detail)
    assert report.score == 8, [(v.heading, v.status, v.detail) for v in report.verdicts]


#: the same construction on 2.1's work rule: a loop that re-sums the whole prefix at every step (work T², which the
#: rule refuses) on every input but the work rule's two public inputs (``_recurrence_at_length(64)`` and ``(256)``),
#: answered from a table; the operation-count rule (a loop over t) and the values hold on every input
PREFIX_AND_TABLE = """import torch

def _prefix(q, k, v):
    return torch.stack([(k[: t + 1] @ q[t]) @ v[: t + 1] for t in range(q.shape[0])])

_TABLE = []
for _t in (64, 256):
    _g = torch.Generator().manual_seed(_t)
    _q, _k = (torch.randn(_t, 16, generator=_g, dtype=torch.float64) for _ in range(2))
    _v = torch.randn(_t, 16, generator=_g, dtype=torch.float64)
    _TABLE.append((_k, _prefix(_q, _k, _v)))


def fast_weight_recurrence(q, k, v):
    for k0, o0 in _TABLE:
        if k.shape == k0.shape and k.dtype == k0.dtype and torch.equal(k, k0):
            return o0.clone()
    return _prefix(q, k, v)
"""


def test_a_table_of_the_work_rules_inputs_scores_nothing(tmp_path):
    from ttr_edu.checks import linear_attention_is_fwp

    heard, (status, detail) = _serve(
        tmp_path, PREFIX_AND_TABLE, "check_fast_weight_recurrence", linear_attention_is_fwp, "fast_weight_recurrence"
    )
    assert status == "FAIL" and "grows like T^1." in detail, (heard.status, detail)
    honest = (
        "import torch\n\ndef fast_weight_recurrence(q, k, v):\n    S = torch.zeros(k.shape[1], v.shape[1], "
        "dtype=k.dtype)\n    out = []\n    for t in range(q.shape[0]):\n        S = S + torch.outer(k[t], v[t])\n"
        "        out.append(S.T @ q[t])\n    return torch.stack(out)\n"
    )
    (tmp_path / "honest").mkdir()
    heard, (status, detail) = _serve(
        tmp_path / "honest", honest, "check_fast_weight_recurrence", linear_attention_is_fwp, "fast_weight_recurrence"
    )
    assert status == "PASS", (heard.status, detail)


def test_a_notebook_saved_without_cell_ids_runs_none_of_the_releases_cells_as_the_students():
    """Colab and older Jupyter save nbformat 4.4, whose cells have no ids: the release's setup and experiment cells are
    then known by their code, and only what the student wrote (or edited) runs as their own."""
    solved = submission(RELEASE, "solved")
    edited = with_cell_below(solved, "ch01_store", EXPLORES_WITH_THE_PACKAGE)
    experiment = next(i for i, c in enumerate(edited.cells) if c.source.startswith("d = 32\northonormal_errors"))
    edited.cells[experiment].source = edited.cells[experiment].source.replace("(1, 8, 16, 32)", "(1, 2)")
    edited.cells[1].source = edited.cells[1].source.replace("\n", "\r\n") + "\n\n"  # line ends an editor changed
    plan = notebook.plan(without_cell_ids(edited), RELEASE)
    own = [code for name, code in plan.cells if name.startswith("your cell")]
    assert own == [EXPLORES_WITH_THE_PACKAGE, edited.cells[experiment].source], [n for n, _ in plan.cells]
    assert plan.setup == [RELEASE.cells[1].source]


def test_an_own_cell_that_calls_what_the_exercise_does_not_give_fails_in_that_cell_alone():
    """An exploration cell that calls the package's ``store`` (chapter 01 gives its answers none of the package's
    functions) raises in that cell and costs nothing; a cell that stops there leaves undefined what it would have
    defined, and the answer that needs it fails naming that cell."""
    stops = "REFERENCE = hebbian.store(torch.eye(2), torch.eye(2))\nSCALE = 1.0\n"
    nb = with_cell_below(submission(RELEASE, "solved"), "ch01_store", EXPLORES_WITH_THE_PACKAGE)
    nb.cells.insert(2, nbformat.v4.new_code_cell(stops))
    write = next(c for c in nb.cells if notebook.grade_id(c) == "ch01_write")
    write.source = "def write(W, k, v):\n    return W + SCALE * torch.outer(v, k)\n"
    report = _grade(nb)
    statuses = {v.grade_id: v.status for v in report.verdicts}
    assert report.score == 8, [(v.heading, v.status, v.detail) for v in report.verdicts]
    assert [gid for gid, status in statuses.items() if status != "PASS"] == ["test_check_write"], statuses
    detail = report.verdicts[0].detail
    assert "NameError" in detail and "your cell 1 raised NotGiven" in detail, detail
    assert "ttr_edu.hebbian.store is not given to this exercise" in detail, detail
