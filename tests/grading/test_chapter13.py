"""The grading engine on chapter 13's capstone, whose graded cells pass their checks the student's own point (and
13.1's initial state) beside the answer: the student's cells that define them are graded with the answers, the
answers' process sends back the point as plain data and what the answers gave, the grader rebuilds the point and
judges (the checks are declared for the engine as staged checks), and each submission scores exactly what it earns:
a forged verdict in the answers' process scores nothing. 13.1 is worth 2 points, 13.2 3 points."""

import copy
from pathlib import Path

import nbformat
import pytest

from ttr_edu.checks.grading import engine, notebook

ROOT = Path(__file__).resolve().parents[2]
NAME = "13_design_your_own_memory.ipynb"
RELEASE = nbformat.read(ROOT / "chapters" / NAME, as_version=4)
SOLVED = nbformat.read(ROOT / "solutions" / NAME, as_version=4)
STEP, MIXER = "ch13_my_step", "ch13_my_mixer"

pytestmark = pytest.mark.notebook


def _solution(gid: str) -> str:
    return next(c.source for c in SOLVED.cells if notebook.grade_id(c) == gid)


def _stub(gid: str) -> str:
    return next(c.source for c in RELEASE.cells if notebook.grade_id(c) == gid)


def _edited(gid: str, old: str, new: str) -> str:
    source = _solution(gid)
    assert source.count(old) == 1, old
    return source.replace(old, new)


IGNORES_THE_GATE = _edited(STEP, "P = P / torch.exp(g)", "P = P")
RAW_GATE = _edited(MIXER, "g = torch.nn.functional.logsigmoid(self.g_proj(x))", "g = self.g_proj(x)")
STEP_IS_THE_STUB = _edited(
    MIXER,
    _solution(MIXER).split("def mix_step", 1)[1].split("def gated_rls_step")[0].split(":\n", 1)[1],
    "        raise NotImplementedError()\n\n\n",
)
WINDOW_GRADIENT_STEP = """MY_POINT = Point.of("window", "linear", "gradient_step")  # a point of the student's own


def initial_state(d_k, d_v):
    return torch.zeros(d_k, d_v, dtype=torch.float64), []


def my_step(state, q, k, v, beta, g):
    S, pairs = state
    lr = MY_POINT.param("lr")
    S, pairs = S + lr * torch.outer(k, v), [*pairs, (k, v)]
    if len(pairs) > MY_POINT.param("window"):  # the pair that leaves the window
        (k0, v0), pairs = pairs[0], pairs[1:]
        S = S - lr * torch.outer(k0, v0)
    return S.T @ q, (S, pairs)
"""
GATED_STEP = """MY_POINT = Point.of("gates", "linear", "{optimizer}")


def initial_state(d_k, d_v):
    return torch.zeros(d_k, d_v, dtype=torch.float64)


def my_step(state, q, k, v, beta, g):
    S = torch.exp(g) * state
    eps = {eps}
    S = S + eps * torch.outer(k, v - S.T @ k)
    return S.T @ q, S
"""
GATED_DELTANET = GATED_STEP.format(optimizer="online_sgd", eps="beta")  # a right step, at a named layer's point
GATED_IMPLICIT = GATED_STEP.format(optimizer="implicit_step", eps="beta / (1 + beta * (k @ k))")
RENAMED_GATED_DELTANET = """from ttr_edu.ops import gated_delta_rule_chunk, gated_delta_rule_recurrent


class MyMemory(Mixer):  # gated DeltaNet's own op with the step β/(1+β): on unit keys, the gated implicit step
    def __init__(self, hidden_size, num_heads=1, *, use_short_conv=True, conv_size=4, feature_map="silu"):
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size, feature_map)
        self.b_proj = torch.nn.Linear(hidden_size, num_heads)
        self.g_proj = torch.nn.Linear(hidden_size, num_heads)
        self.o_norm = torch.nn.RMSNorm(self.head_dim)

    def op_inputs(self, x, qkv):
        q, k = self._normed_qk(qkv)
        v = self._heads(qkv[..., 2 * self.hidden_size :])
        beta = torch.sigmoid(self.b_proj(x))
        return {"q": q, "k": k, "v": v, "beta": beta, "g": torch.nn.functional.logsigmoid(self.g_proj(x))}

    def mix(self, q, k, v, beta, g):
        return self.o_norm(gated_delta_rule_chunk(q, k, v, g, beta / (1 + beta), scale=1.0)[0])

    def mix_step(self, memory, q, k, v, beta, g):
        o, S = gated_delta_rule_recurrent(
            q, k, v, g, beta / (1 + beta), scale=1.0, initial_state=memory, output_final_state=True
        )
        return self.o_norm(o), S


MY_SPEC = register(MixerSpec("my_memory", "my memory", MyMemory), replace=True)
"""

FRAMEWORK_SOLVER_STEP = """from ttr_edu.regression.linear import LINEAR_SOLVERS
from ttr_edu.regression.optimizers import RecursiveLeastSquares

MY_POINT = checks.SUGGESTED
RLS = RecursiveLeastSquares(ridge=MY_POINT.param("ridge"))


def initial_state(d_k, d_v):
    return []


def my_step(state, q, k, v, beta, g):  # the framework's own RLS solver, one level below TestTimeRegression
    state = state + [(q, k, v, g)]
    Q, K, V, G = (torch.stack(x)[None, None] for x in zip(*state))
    o, _ = LINEAR_SOLVERS[RecursiveLeastSquares](RLS, Q, K, V, G, None, None)
    return o[0, 0, -1], state
"""
FRAMEWORK_SOLVER_MIXER = (
    FRAMEWORK_SOLVER_STEP.split("\n\n\ndef ", 1)[0]
    + "\n\n\n"
    + _solution(MIXER).split("    def op_inputs", 1)[0]
    + """    def op_inputs(self, x, qkv):
        q, k = self._normed_qk(qkv)
        v = self._heads(qkv[..., 2 * self.hidden_size :])
        return {"q": q, "k": k, "v": v, "g": torch.nn.functional.logsigmoid(self.g_proj(x))}

    def mix(self, q, k, v, g):  # the same solver over the whole sequence
        o, _ = LINEAR_SOLVERS[RecursiveLeastSquares](RLS, *(x.transpose(1, 2) for x in (q, k, v, g)), None, None)
        return self.o_norm(o.transpose(1, 2))

    def mix_step(self, memory, q, k, v, g):  # reruns the prefix
        prefix = (q, k, v, g) if memory is None else tuple(torch.cat(x, 1) for x in zip(memory, (q, k, v, g)))
        return self.mix(*prefix)[:, -1:], prefix


MY_SPEC = register(MixerSpec("my_memory", "my memory", MyMemory), replace=True)
"""
)

W1F = (Path("/tmp/r38/w1f.py"),)  # the reviewer's renamed layer (r38), kept here as RENAMED_GATED_DELTANET too
FORGE = """
import sys
from ttr_edu.checks import _core, _rules
from ttr_edu.checks import design_your_own_memory as _mine


def _passes(*args, **kwargs):  # every check of the answers' process now passes, and says so
    print("PASS my_step: your function agrees with the reference on 4 random cases.")
    print("PASS my_mixer: my_memory is the point, distinct from every named layer.")
    return True


for _module in (_mine, _rules, sys.modules["ttr_edu.checks"]):
    for _name in ("check_my_step", "check_my_mixer", "run_check", "run_staged", "run_in_kernel", "judge_case"):
        if hasattr(_module, _name):
            vars(_module)[_name] = _passes  # past the modules' read-only guard
vars(_core)["CheckFailed"] = type("Quiet", (Exception,), {})
_passes()
"""
FORGED_STEP = FORGE + _stub(STEP)
FORGED_MIXER = FORGE + _stub(MIXER)

THREAD_STEP = """MY_POINT = checks.SUGGESTED
import queue, threading
JOBS = queue.Queue()


def _worker():  # started by the cell, before the check's call trace begins (an attacker's a37b/B6)
    while True:
        args, box, done = JOBS.get()
        box.append(checks.point_outputs(*args))
        done.set()


threading.Thread(target=_worker, daemon=True).start()


def initial_state(d_k, d_v):
    return []


def my_step(state, q, k, v, beta, g):
    history = state + [(q, k, v, beta, g)]
    Q, K, V, B, G = (torch.stack([h[i] for h in history]) for i in range(5))
    box, done = [], threading.Event()
    JOBS.put(((MY_POINT, Q, K, V, B, G), box, done))
    done.wait()
    return box[0][-1], history
"""

TRACE_OFF_STEP = """MY_POINT = checks.SUGGESTED
import sys


def initial_state(d_k, d_v):
    return []


def my_step(state, q, k, v, beta, g):  # the trace off by a call no c_call event reports (an attacker's a37c/C3)
    history = state + [(q, k, v, beta, g)]
    Q, K, V, B, G = (torch.stack([h[i] for h in history]) for i in range(5))
    list(map(sys.setprofile, [None]))
    return checks.point_outputs(MY_POINT, Q, K, V, B, G)[-1], history
"""

UNTRACED_THREAD_STEP = TRACE_OFF_STEP.replace(
    "    list(map(sys.setprofile, [None]))\n    return checks.point_outputs(MY_POINT, Q, K, V, B, G)[-1], history",
    "    import threading\n    threading.setprofile(None)\n    box = []\n"
    "    worker = threading.Thread(target=lambda: box.append(checks.point_outputs(MY_POINT, Q, K, V, B, G)))\n"
    "    worker.start()\n    worker.join()\n    return box[0][-1], history",
)
assert UNTRACED_THREAD_STEP != TRACE_OFF_STEP

#: a37d's A1: the call trace read with sys.getprofile() (no audit event) and its tables emptied, then the framework's
#: own point_outputs; it scored 13.1's 2 points while the allow-list rested on the trace. The answers' process of 13.1
#: now empties the framework (every function not given) before the student's cells run, as for chapters 01-12.
TRACE_EMPTIED_STEP = """MY_POINT = checks.SUGGESTED
import sys

def initial_state(d_k, d_v):
    return []

def my_step(state, q, k, v, beta, g):
    t = sys.getprofile()
    if t is not None and hasattr(t, "codes"):
        t.codes = {}
        t.allowed = None
    state = state + [(q, k, v, beta, g)]
    Q, K, V, B, G = (torch.stack([s[i] for s in state]) for i in range(5))
    return checks.point_outputs(MY_POINT, Q, K, V, B, G)[-1], state
"""

SUBMISSIONS = {  # name: (answers by grade id, points)
    "solved": ({STEP: _solution(STEP), MIXER: _solution(MIXER)}, 5),
    "unsolved": ({}, 0),
    "wrong: the gate ignored, a raw gate": ({STEP: IGNORES_THE_GATE, MIXER: RAW_GATE}, 0),
    "13.1 right, 13.2 without its mix_step": ({STEP: _solution(STEP), MIXER: STEP_IS_THE_STUB}, 2),
    "13.1 at a point of the student's own": ({STEP: WINDOW_GRADIENT_STEP}, 2),
    "13.1 at gated DeltaNet's point": ({STEP: GATED_DELTANET}, 0),
    "gated DeltaNet's op at β/(1+β), at the gated implicit step": (
        {STEP: GATED_IMPLICIT, MIXER: RENAMED_GATED_DELTANET},
        0,
    ),
    "the framework's RLS solver (LINEAR_SOLVERS), the reviewer's bypass (r38c)": (
        {STEP: FRAMEWORK_SOLVER_STEP, MIXER: FRAMEWORK_SOLVER_MIXER},
        0,
    ),
    "13.1 by the framework in a thread the cell started": ({STEP: THREAD_STEP}, 0),
    "13.1 by the framework with the trace switched off": ({STEP: TRACE_OFF_STEP}, 0),
    "13.1 by the framework in a thread started untraced": ({STEP: UNTRACED_THREAD_STEP}, 0),
    "13.1 by the framework with the trace's tables emptied (a37d)": ({STEP: TRACE_EMPTIED_STEP}, 0),
    "the stubs, with the checks replaced by ones that pass in the answers' process": (
        {STEP: FORGED_STEP, MIXER: FORGED_MIXER},
        0,
    ),
}


def _submission(answers: dict):
    nb = copy.deepcopy(RELEASE)
    for cell in nb.cells:
        if notebook.grade_id(cell) in answers:
            cell.source = answers[notebook.grade_id(cell)]
    return nb


def test_the_plan_passes_the_students_point_and_runs_the_cells_that_define_it():
    plan = notebook.plan(_submission({}), RELEASE)
    calls = {u.grade_id: [(c.check, c.expression, c.arguments) for c in u.checks] for u in plan.units}
    assert calls == {
        "test_check_my_step": [("check_my_step", "my_step, initial_state, MY_POINT", 3)],
        "test_check_my_mixer": [("check_my_mixer", "MY_SPEC, MY_POINT", 2)],
    }
    answers = dict(plan.cells)
    assert "MY_POINT = checks.SUGGESTED" in answers[f"exercise cell {STEP}"]  # the student's cell, not a setup cell
    assert "MY_SPEC = register(" in answers[f"exercise cell {MIXER}"]
    assert not any("MY_POINT =" in s for s in plan.setup)
    assert any("import REGISTRY, Mixer, MixerSpec, register" in s for s in plan.setup)


@pytest.mark.parametrize("name", list(SUBMISSIONS))
def test_each_submission_scores_what_it_earns(name):
    answers, points = SUBMISSIONS[name]
    report = engine.grade(_submission(answers), RELEASE, timeout=120)
    verdicts = [(v.grade_id, v.status, v.detail[:300]) for v in report.verdicts]
    assert (report.score, report.max_score) == (points, 5), verdicts
    assert not any("not declared for the engine" in p for p in report.problems), report.problems
    by_id = {v.grade_id: v for v in report.verdicts}
    if name.startswith("wrong"):
        assert "ignores or mistakes the weights" in by_id["test_check_my_step"].detail, verdicts
        assert "op_inputs gave g from" in by_id["test_check_my_mixer"].detail, verdicts
    if name == "13.1 at gated DeltaNet's point":
        assert "is a named layer's point" in by_id["test_check_my_step"].detail, verdicts
    if name.startswith("the framework's RLS solver"):
        for gid in ("test_check_my_step", "test_check_my_mixer"):
            refused = "ttr_edu.regression.linear._recursive_least_squares is not given to this exercise"
            assert refused in by_id[gid].detail, verdicts
    if name.startswith("13.1 by the framework with the trace switched off"):
        assert "does not let an answer switch the check's call trace" in by_id["test_check_my_step"].detail, verdicts
    if name.startswith("13.1 by the framework in a thread started untraced") or "tables emptied" in name:
        # 13.1's process empties the framework: the thread (or the disarmed trace) reaches an emptied function
        assert "is not given to this exercise" in by_id["test_check_my_step"].detail, verdicts
    if name.startswith("13.1 by the framework in a thread the cell"):
        assert "your cells left a Python thread running" in by_id["test_check_my_step"].detail, verdicts
    if name.startswith("gated DeltaNet's op"):
        for gid in ("test_check_my_step", "test_check_my_mixer"):
            assert "computes gated DeltaNet with a step size and a gate of its own" in by_id[gid].detail, verdicts


def test_the_forged_checks_do_pass_in_the_answers_process():
    """The forgery above is a real one: run where the answers run (a process of their own), the graded cells' checks
    pass on the stubs and print PASS."""
    import subprocess
    import sys

    setup = "import torch\nfrom ttr_edu.layers import Mixer, MixerSpec, register\n"
    setup += "from ttr_edu.checks import design_your_own_memory as checks\n"
    graded = [c.source for c in RELEASE.cells if notebook.grade_id(c) in ("test_check_my_step", "test_check_my_mixer")]
    program = "\n".join([setup, FORGED_STEP, *graded[:1], FORGED_MIXER, *graded[1:], "print('ran to the end')"])
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "PASS my_mixer" in done.stdout and "ran to the end" in done.stdout, done.stdout


@pytest.mark.skipif(not W1F[0].exists(), reason="the reviewer's file is not on this machine")
def test_the_reviewers_renamed_layer_scores_nothing():
    """r38's w1f: gated DeltaNet's own op at β/(1+β), under a name of its own, with the chapter's default point: the op
    is not given to the exercise (its mix, called without β, used to fail on that first)."""
    source = W1F[0].read_text().replace("checks.check_my_mixer(MY_SPEC, checks.SUGGESTED)", "")
    answers = {STEP: _solution(STEP), MIXER: source + "\nMY_POINT = checks.SUGGESTED\n"}
    report = engine.grade(_submission(answers), RELEASE, timeout=120)
    by_id = {v.grade_id: v for v in report.verdicts}
    assert by_id["test_check_my_mixer"].earned == 0, by_id["test_check_my_mixer"]
    assert "gated_delta_rule_chunk is not given to this exercise" in by_id["test_check_my_mixer"].detail


@pytest.mark.slow
def test_nbgrader_autograde_with_the_engine_gives_the_same_points(tmp_path):
    """The instructor's path (grading.md): generate_assignment from the solutions, autograde with ``use_engine``."""
    import os
    import shutil
    import subprocess
    import sys

    pytest.importorskip("nbgrader")
    from nbgrader.api import Gradebook

    from tests.grading.test_nbgrader import CONFIG

    course = tmp_path / "course"
    (course / "source" / "ch13").mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / NAME, course / "source" / "ch13")
    (course / "nbgrader_config.py").write_text(CONFIG.replace("timeout = 30", "timeout = 120"))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    env.pop("NBGRADER_EXECUTION", None)

    def nbgrader(*args):
        done = subprocess.run(
            [sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True, text=True, timeout=1200
        )
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]

    nbgrader("generate_assignment", "ch13", "--force")
    release = nbformat.read(course / "release" / "ch13" / NAME, as_version=4)
    want = {"solved": 5, "unsolved": 0, "wrong": 0}
    names = {"solved": "solved", "unsolved": "unsolved", "wrong": "wrong: the gate ignored, a raw gate"}
    for student, name in names.items():
        nb = copy.deepcopy(release)
        for cell in nb.cells:
            if notebook.grade_id(cell) in SUBMISSIONS[name][0]:
                cell.source = SUBMISSIONS[name][0][notebook.grade_id(cell)]
        (course / "submitted" / student / "ch13").mkdir(parents=True)
        nbformat.write(nb, course / "submitted" / student / "ch13" / NAME)
    nbgrader("autograde", "ch13", "--create", "--force")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        got = {student: gradebook.find_submission("ch13", student).score for student in want}
    assert got == want


def test_a_point_with_a_window_of_1000_is_refused_quickly_by_the_grader():
    """The grader runs the references at the student's point: a window of 1000 cost it 146 s and 3.2 GB under
    ``nbgrader autograde`` (a37e; 2000 ran past 8 minutes and 10 GB). The rebuilt point's parameters are refused
    outside the check's ranges before anything is judged, in the grader as in the student's kernel."""
    import time

    big = WINDOW_GRADIENT_STEP.replace(
        'Point.of("window", "linear", "gradient_step")', 'Point.of("window", "linear", "gradient_step", window=1000)'
    )
    assert big != WINDOW_GRADIENT_STEP
    started = time.monotonic()
    report = engine.grade(_submission({STEP: big}), RELEASE, timeout=120)
    seconds = time.monotonic() - started
    step = next(v for v in report.verdicts if v.grade_id == "test_check_my_step")
    assert step.status == "FAIL" and "window of your point (w) is 1000" in step.detail, step.detail
    assert "an integer from 1 to 64" in step.detail, step.detail
    assert seconds < 60, seconds
