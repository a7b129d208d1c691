"""Grading in the student's kernel: every check cell is an nbgrader test worth its exercise's stars that imports its
check afresh; an unattempted or wrong exercise fails its graded cell under nbgrader's autograder and prints in the
student's own kernel, where the notebook runs on; the attacks that need only ordinary Python score 0 there too. (The
grading engine, which computes the grade out of the student's reach, is tested in tests/grading.)"""

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from ttr_edu.checks._core import CheckFailed
from ttr_edu.checks._rules import run_check
from ttr_edu.course.notebooks import CHECK_CALL, CHECKS_IMPORT, FRESH_IMPORT, STARS, stamp_grading

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
            module = CHECKS_IMPORT.search(cell.source)  # the check is imported afresh, in the graded cell itself
            assert module and cell.source.startswith(FRESH_IMPORT.format(module=module.group(1)) + "\n"), cell.source
    solutions = sum(c.metadata.get("nbgrader", {}).get("solution", False) for c in nb.cells)
    assert checks == solutions, f"{path.name}: {solutions} exercises but {checks} graded check cells"


def test_generating_twice_changes_no_check_cell():
    nb = nbformat.read(ROOT / "solutions" / "04_delta_rule.ipynb", 4)
    once = stamp_grading(nb)
    assert [c.source for c in stamp_grading(once).cells] == [c.source for c in once.cells]


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


_STUB_WRITE = "def write(W, k, v):\n    raise NotImplementedError()"
_ALWAYS_PASS = """

class _AlwaysPass:  # every check prints PASS and returns True
    def __getattr__(self, name):
        return lambda *a, **k: print(f"PASS {name}") or True


checks = _AlwaysPass()
import ttr_edu.checks.hebbian_memory as _module

try:
    _module.check_store = lambda f: True  # the check itself, replaced in its module
except AttributeError:
    pass
"""
_AGREE = """import torch as _t


class _Agree(_t.Tensor):  # torch.allclose says True for it
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (_t.allclose, _t.Tensor.allclose):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


def write(W, k, v):
    return _t.zeros_like(W).as_subclass(_Agree)
"""
_OWN = {  # a one-line call to the package's own solution, for every exercise
    "ch01_write": "def write(W, k, v):\n    return hebbian.hebbian_write(W, k, v)",
    "ch01_store": "def store(keys, values):\n    return hebbian.store(keys, values)",
    "ch01_crosstalk": "def crosstalk_energy(keys):\n    return hebbian.crosstalk_energy(keys)",
    "ch01_accuracy": "def recall_accuracy(W, keys, values):\n    return hebbian.recall_accuracy(W, keys, values)",
    "ch01_rival_noise": "def cleanup_scores(keys, values):\n    return hebbian.cleanup_scores(keys, values)\n\n\n"
    "def rival_score_variance(n, d):\n    return hebbian.rival_score_variance(n, d)",
}
#: (what the submission does to chapter 01's release) -> its answers (cell id -> source), and its check cells
#: (grade id -> new source, or None: deleted)
SUBMISSIONS = {
    "partial (1.1 right, 1.2 wrong)": (
        {
            "ch01_write": "def write(W, k, v):\n    return W + torch.outer(v, k)",
            "ch01_store": "def store(keys, values):\n    return 2 * values.T @ keys",
        },
        {},
    ),
    "attack 1: rebinds checks": (
        {"ch01_write": "def write(W, k, v):\n    raise NotImplementedError()" + _ALWAYS_PASS},
        {},
    ),
    "attack 2: Tensor subclass": ({"ch01_write": _AGREE}, {}),
    "attack 3: unsets NBGRADER_EXECUTION": (
        {
            "ch01_write": "import os\nos.environ.pop('NBGRADER_EXECUTION', None)\n\n\n"
            "def write(W, k, v):\n    raise NotImplementedError()"
        },
        {},
    ),
    "attack 4: calls the package's solution": (_OWN, {}),
    "attack 5: edits and deletes check cells": (
        {"ch01_store": "def store(keys, values):\n    return 2 * values.T @ keys"},
        {"test_check_write": 'print("PASS")', "test_check_store": 'print("PASS")', "test_check_crosstalk_energy": None},
    ),
}


def _submission(released: Path, answers: dict, check_cells: dict):
    nb = nbformat.read(released, 4)
    for cell in list(nb.cells):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
        if grade_id in check_cells:
            if check_cells[grade_id] is None:
                nb.cells.remove(cell)
            else:
                cell.source = check_cells[grade_id]
    return nb


def autograde(course: Path, root: Path, config: str = "") -> tuple[dict, str]:
    """nbgrader's own generate_assignment and autograde on chapter 01 of ``root`` (its package on PYTHONPATH), for a
    solved, an unsolved and every submission of :data:`SUBMISSIONS`: ``{student: (score, max score)}`` and what
    autograde printed."""
    chapter = root / "solutions" / "01_hebbian_memory.ipynb"
    (course / "source" / "ch01").mkdir(parents=True)
    shutil.copy(chapter, course / "source" / "ch01")
    (course / "nbgrader_config.py").write_text(
        'c = get_config()\nc.CourseDirectory.course_id = "ttr-edu"\nc.CourseDirectory.db_url = "sqlite:///gradebook.db"\n'
        "c.Execute.iopub_timeout = 120\n" + config  # nbgrader waits 4 s for output by default: too little under load
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(root),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        # the nbgrader_config.py that installing ttr-edu puts on Jupyter's config path (it turns the engine on)
        "JUPYTER_CONFIG_PATH": str(root / "jupyter-config"),
    }

    def run(*args):
        result = subprocess.run(
            [sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True, text=True, timeout=1800
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        return result.stdout + result.stderr

    run("generate_assignment", "ch01", "--force")
    released = course / "release" / "ch01" / chapter.name
    students = {"solved": nbformat.read(chapter, 4), "unsolved": nbformat.read(released, 4)}
    students.update({name: _submission(released, *how) for name, how in SUBMISSIONS.items()})
    ids = {}
    for i, (name, nb) in enumerate(students.items()):
        ids[name] = f"s{i}"
        (course / "submitted" / ids[name] / "ch01").mkdir(parents=True)
        nbformat.write(nb, course / "submitted" / ids[name] / "ch01" / chapter.name)
    printed = run("autograde", "ch01", "--create", "--force")
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        scores = {name: gradebook.find_submission("ch01", ids[name]) for name in students}
        return {name: (s.score, s.max_score) for name, s in scores.items()}, printed


#: The kernel's transport warning stays out of autograde's output.
QUIET = 'c.KernelManager.transport_encryption = "auto"\n'
#: What an instructor writes to turn off the grading engine that installing ttr-edu turns on (grading.md).
ENGINE_OFF = "c.GradeWithEngine.enabled = False\n"


@pytest.mark.slow
@pytest.mark.notebook
def test_without_the_engine_the_checks_in_the_kernel_still_score_the_simple_attacks_0(tmp_path):
    """nbgrader's own autograde on chapter 01 *without* the grading engine (a course whose nbgrader_config.py turns it
    off): the notebook runs in a kernel and the checks decide there, which grading.md says not to rely on. The
    attacks that need no more than ordinary Python (rebinding `checks`, a Tensor subclass, unsetting
    NBGRADER_EXECUTION, a one-line call to the package's solution, edited and deleted check cells) still score 0, and
    honest work scores exactly. (The engine's path: tests/grading/test_nbgrader.py.)"""
    pytest.importorskip("nbgrader")
    got, printed = autograde(tmp_path, ROOT, QUIET + ENGINE_OFF)
    print(f"nbgrader scores: {got}")
    nb = nbformat.read(ROOT / "solutions" / "01_hebbian_memory.ipynb", 4)
    full = sum(c.metadata["nbgrader"]["points"] for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade"))
    assert full == 9
    want = {"solved": (9.0, 9.0), "unsolved": (0.0, 9.0), "partial (1.1 right, 1.2 wrong)": (1.0, 9.0)}
    want.update({name: (0.0, 9.0) for name in SUBMISSIONS if name.startswith("attack")})
    assert got == want
    assert "without encryption" not in printed  # quiet checks: no kernel transport warning
    autograded = nbformat.read(tmp_path / "autograded" / "s0" / "ch01" / "01_hebbian_memory.ipynb", 4)  # solved
    assert "ttr_edu_grading" not in autograded.metadata  # graded in a kernel: the engine stepped aside


# -- what a submission cannot do to a check (the machinery; the attacks on whole notebooks are below) ----------------


def test_the_checks_cannot_be_replaced_by_assignment():
    from ttr_edu.checks import _core, _rules
    from ttr_edu.checks import hebbian_memory as checks

    for module, name in ((checks, "check_write"), (checks, "hebbian"), (_rules, "run_check"), (_core, "_compare")):
        with pytest.raises(AttributeError, match="read-only"):
            setattr(module, name, lambda *a, **k: True)
        with pytest.raises(AttributeError, match="read-only"):
            delattr(module, name)
    import ttr_edu.checks

    with pytest.raises(AttributeError, match="read-only"):
        ttr_edu.checks.hebbian_memory = object()


class _Agrees(torch.Tensor):
    """A Tensor subclass that answers torch.allclose (function and method) with True."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.allclose, torch.Tensor.allclose, torch.isclose, torch.equal):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


def test_a_tensor_subclass_or_a_lookalike_is_refused():
    from ttr_edu.checks import hebbian_memory as checks

    with pytest.raises(CheckFailed, match="expected a plain torch.Tensor, got _Agrees"):
        checks.check_write(lambda W, k, v: torch.zeros_like(W).as_subclass(_Agrees))
    with pytest.raises(CheckFailed, match="expected a plain torch.Tensor, got list"):
        checks.check_write(lambda W, k, v: (W + torch.outer(v, k)).tolist())

    class Number:  # a value whose float() is whatever is asked of it
        def __float__(self):
            return 0.5

    with pytest.raises(CheckFailed, match="asks for a Python float, your function returned a Number"):
        checks.check_rival_score_variance(lambda n, d: Number())


def test_a_patched_torch_or_package_function_stops_every_check(monkeypatch):
    from ttr_edu import hebbian
    from ttr_edu.checks import hebbian_memory as checks

    def right(W, k, v):
        return W + torch.outer(v, k)

    monkeypatch.setattr(torch, "allclose", lambda *a, **k: True)
    with pytest.raises(CheckFailed, match=r"torch\.allclose was replaced"):
        checks.check_write(right)
    monkeypatch.undo()
    monkeypatch.setattr(hebbian, "hebbian_write", lambda W, k, v: W)  # the reference made to agree with a wrong answer
    with pytest.raises(CheckFailed, match=r"ttr_edu\.hebbian\.hebbian_write was replaced by code from the notebook"):
        checks.check_write(lambda W, k, v: W)
    monkeypatch.undo()
    assert checks.check_write(right) is True


#: checks that refuse the copy by a reason of their own (every other one names the package's call, which the trace
#: saw before any rule the reference itself breaks, such as a solver that the exercise rules out)
ADAPTED = {
    # the check reads the weights off the model the answer trains in place; the copy trains a copy of that model and
    # hands back the reference's (losses, weights) where the losses belong
    "train_lm": r"train_lm\[0\]: expected a plain torch\.Tensor, got tuple",
    # the answer wires the check's model in place; handing back the reference's return value wires nothing
    "wire_recall_circuit": r"wire_recall_circuit: got 0\.0, expected 1\.0",
    # the answer is a mixer's spec, not a function: calling the copy builds none
    "my_mixer": "building your spec raised",
    # a staged check: its reference is built in the grader's half, after the answer's calls, so the stack of the
    # answer's half holds a declaration whose reference refuses to run there, and the allow-list refuses the call
    # first (the check module's code is given only where it wraps the answer)
    "my_step": r"_no_reference is not given to this exercise|the reference runs in the grader, not where the answer",
    # chapter 02's reference is the parallel form: its T × T scores are refused by the size rule before anything
    # else (chapter 11's exercise of the same name refuses the call itself)
    "chunk_linear_attention": r"your function built a \d+ tensor|calls the package's own implementation",
    "normalized_chunk_linear_attention": r"your function built a \d+ tensor|calls the package's own implementation",
}


def test_an_answer_that_calls_its_own_reference_is_refused_by_every_check():
    """For every check: an answer that hands back what the check's own reference computes fails by name."""
    import importlib
    import inspect
    import pkgutil

    import ttr_edu.checks

    exercise = []

    def copycat(*args, **kwargs):
        frame = sys._getframe(1)  # the check's declaration and case, found on the stack: its reference on the case
        while frame is not None and not {"declared", "case"} <= set(frame.f_locals):
            frame = frame.f_back
        if frame is not None:
            return frame.f_locals["declared"].reference(**copy.deepcopy(frame.f_locals["case"]))
        # called by the check outside run_check (to test the answer's type first, or to word a failure): the
        # package function of the exercise's name, found where the check module imports it
        namespace = vars(module)
        found = namespace.get(exercise[0]) or next(
            getattr(m, exercise[0])
            for m in namespace.values()
            if inspect.ismodule(m) and m.__name__.startswith("ttr_edu") and hasattr(m, exercise[0])
        )
        return found(**kwargs)

    tried = 0
    for info in pkgutil.iter_modules(ttr_edu.checks.__path__):
        if info.name.startswith("_") or info.name == "triton_kernels":  # the Triton checks take kernels
            continue
        module = importlib.import_module(f"ttr_edu.checks.{info.name}")
        for name, check in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("check_") and check.__module__ == module.__name__:
                exercise[:] = [name.removeprefix("check_")]
                # a check whose reference computes something else than the answer (rotation_keys: the answer is
                # two keys, the reference their product) has no package implementation to call: the copy fails
                # on its type instead
                message = ADAPTED.get(exercise[0], "calls the package's own implementation")
                with pytest.raises(CheckFailed, match=message):
                    check(copycat)
                tried += 1
    assert tried >= 30


def test_a_wrong_answer_reports_and_runs_on_in_the_students_kernel(monkeypatch, capsys):
    """Run All runs all: in a kernel, a failed check prints FAIL and returns False; under the autograder it raises."""
    import IPython

    from ttr_edu.checks import hebbian_memory as checks

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())  # as in JupyterLab
    assert checks.check_store(lambda keys, values: 2 * values.T @ keys) is False
    err = capsys.readouterr().err
    assert (
        err.startswith("FAIL store: wrong values")
        and "the cells below do not use your function until its check passes" in err
    )
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    with pytest.raises(CheckFailed, match="store: wrong values"):
        checks.check_store(lambda keys, values: 2 * values.T @ keys)


def test_passed_tells_a_later_cell_whether_to_use_the_students_function(monkeypatch, capsys):
    """A cell below an exercise uses the student's function only once its check has passed (checks.passed): a wrong
    answer, an unattempted one and a check not yet run all leave it on the package's own implementation."""
    import IPython

    from ttr_edu.checks import hebbian_memory as checks
    from ttr_edu.checks import passed

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())  # as in JupyterLab

    def unattempted(keys, values):
        raise NotImplementedError()

    def right(keys, values):
        return torch.einsum("n k, n v -> v k", keys, values)

    assert passed("no_such_exercise") is False
    assert checks.check_store(unattempted) is False and passed("store") is False
    assert checks.check_store(right) is True and passed("store") is True
    assert checks.check_store(lambda keys, values: 2 * values.T @ keys) is False and passed("store") is False
    capsys.readouterr()
    with pytest.raises(TypeError, match="^exercise: expected the exercise's name as a string"):
        passed(checks.check_store)


def test_unsetting_nbgrader_execution_in_the_notebook_changes_nothing():
    """The autograder's kernel starts with NBGRADER_EXECUTION=autograde; a cell that unsets it (os.environ.pop,
    unsetenv, even clearenv) still gets 0 for an unattempted exercise."""
    code = (
        "import ctypes, os, sys\n"
        "os.environ.pop('NBGRADER_EXECUTION'); ctypes.CDLL(None).clearenv()\n"
        "from ttr_edu.checks import hebbian_memory as checks, CheckFailed\n"
        "def write(W, k, v):\n    raise NotImplementedError()\n"
        "try:\n    checks.check_write(write)\nexcept CheckFailed as err:\n    print('raised:', err)\n"
    )
    env = {**os.environ, "NBGRADER_EXECUTION": "autograde", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    if not Path("/proc/self/environ").exists():  # pragma: no cover - elsewhere only the value at import is kept
        pytest.skip("no /proc: the start-up environment is read through psutil, if installed")
    assert "raised: write: not attempted" in result.stdout, result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.notebook
def test_run_all_runs_to_the_last_cell_with_a_wrong_answer(tmp_path, monkeypatch):
    """JupyterLab's "Run All" stops at the first cell that raises; nbclient without allow_errors does the same. A
    student copy of chapter 01 with one wrong answer (1.5, whose check decides which function the experiment after it
    uses) and the rest unattempted runs to its last cell, showing FAIL with the reason."""
    from nbclient import NotebookClient

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    nb = nbformat.read(ROOT / "chapters" / "01_hebbian_memory.ipynb", 4)
    wrong = "def cleanup_scores(keys, values):\n    return keys @ keys.transpose(1, 2)\n\n\n"
    wrong += "def rival_score_variance(n, d):\n    raise NotImplementedError()"
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ch01_rival_noise")
    answer.source = wrong
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.skip_cells_with_tag = "run-all-runs-every-cell"  # JupyterLab runs the widget cells the book skips
    client.execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code)  # every cell ran, the last one included
    check = next(c for c in code if c.metadata.get("nbgrader", {}).get("grade_id") == "test_check_cleanup_scores")
    text = "".join(o.get("text", "") for o in check.outputs if o.get("output_type") == "stream")
    assert (
        "FAIL cleanup_scores: wrong values" in text
        and "the cells below do not use your function until its check passes" in text
    )
    assert "[not attempted yet] rival_score_variance" in text
