"""Chapter 01 submissions for the grading tests: honest ones, and ones that try to score without solving anything.

Chapter 01 is worth 9 points: 1.1 write (1), 1.2 store (1), 1.3 crosstalk_energy (2), 1.4 recall_accuracy (2),
1.5 cleanup_scores + rival_score_variance (3). Each submission is ``(answers by nbgrader grade_id, an edit of the whole
notebook or None, the points it must score)``.
"""

from __future__ import annotations

import copy

RIGHT = {
    "ch01_write": "def write(W, k, v):\n    return W + torch.outer(v, k)\n",
    "ch01_store": "def store(keys, values):\n    return values.T @ keys\n",
    "ch01_crosstalk": (
        "def crosstalk_energy(keys):\n    gram = keys @ keys.T\n"
        "    return ((gram - torch.diag(torch.diagonal(gram))) ** 2).sum(dim=0).mean()\n"
    ),
    "ch01_accuracy": (
        "def recall_accuracy(W, keys, values):\n    scores = (keys @ W.T) @ values.T\n    rivals = scores.clone()\n"
        "    rivals.fill_diagonal_(-torch.inf)\n"
        "    return (torch.diagonal(scores) > rivals.max(dim=1).values).double().mean().item()\n"
    ),
    "ch01_rival_noise": (
        "def cleanup_scores(keys, values):\n    W = values.transpose(1, 2) @ keys\n"
        "    return (keys @ W.transpose(1, 2)) @ values.transpose(1, 2)\n\n\n"
        "def rival_score_variance(n, d):\n    return 2 / d + (n - 2) / d**2\n"
    ),
}
STUB = {gid: source.split(":\n", 1)[0] + ":\n    raise NotImplementedError()\n" for gid, source in RIGHT.items()}
STUB["ch01_rival_noise"] = (
    "def cleanup_scores(keys, values):\n    raise NotImplementedError()\n\n\n"
    "def rival_score_variance(n, d):\n    raise NotImplementedError()\n"
)
FUNCTIONS = {  # grade id -> (function, the package's own implementation of it)
    "ch01_write": [("write(W, k, v)", "hebbian.hebbian_write(W, k, v)")],
    "ch01_store": [("store(keys, values)", "hebbian.store(keys, values)")],
    "ch01_crosstalk": [("crosstalk_energy(keys)", "hebbian.crosstalk_energy(keys)")],
    "ch01_accuracy": [("recall_accuracy(W, keys, values)", "hebbian.recall_accuracy(W, keys, values)")],
    "ch01_rival_noise": [
        ("cleanup_scores(keys, values)", "hebbian.cleanup_scores(keys, values)"),
        ("rival_score_variance(n, d)", "hebbian.rival_score_variance(n, d)"),
    ],
}


def every_answer(body: str, first: str = "") -> dict:
    """Every exercise answered by ``body`` (``{call}``: the package's own implementation); ``first`` goes above 1.1."""
    out = {
        gid: "\n\n".join(f"def {signature}:\n" + body.format(call=call) for signature, call in functions)
        for gid, functions in FUNCTIONS.items()
    }
    out["ch01_write"] = first + out["ch01_write"]
    return out


def before_everything(code: str, base: dict = STUB) -> dict:
    return {**base, "ch01_write": code + "\n\n\n" + base["ch01_write"]}


def _pasted_check_cell(nb, nbformat):
    """A right write() in a cell of the student's own at the end, then a pasted copy of 1.1's graded cell."""
    check = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_check_write")
    nb.cells.append(nbformat.v4.new_code_cell(RIGHT["ch01_write"]))
    pasted = copy.deepcopy(check)
    pasted.id = "pasted-copy"
    nb.cells.append(pasted)


_FORGET_ERRORS = """def _forget(result):
    if result.error_in_exec is not None:
        result.error_in_exec = None
        from IPython.display import clear_output
        clear_output()


get_ipython().events.register("post_run_cell", _forget)"""
_FULL_MARKS_FIRST = """def _mark(info):
    hook = get_ipython().displayhook
    hook.start_displayhook()
    hook.write_format_data({"text/plain": "full marks"}, {})
    hook.finish_displayhook()


get_ipython().events.register("pre_run_cell", _mark)"""
_FROM_THE_STACK = """import copy, sys


def _expected():
    frame = sys._getframe(2)
    while frame is not None:
        for name in ("want", "expected", "reference"):
            if name in frame.f_locals:
                value = frame.f_locals[name]
                return copy.deepcopy(value(**frame.f_locals.get("case", {})) if callable(value) else value)
        frame = frame.f_back
    raise LookupError("nothing found")


"""
_FAKE_CHECKS = """import builtins, types


class _Yes:
    def __getattr__(self, name):
        return lambda *args, **kwargs: True


_import = builtins.__import__


def _fake(name, globals=None, locals=None, fromlist=(), level=0):
    if name == "ttr_edu.checks" and fromlist:
        return types.SimpleNamespace(hebbian_memory=_Yes())
    return _import(name, globals, locals, fromlist, level)


builtins.__import__ = _fake"""
_WRITES_THE_GRADEBOOK_LATER = """import pathlib, subprocess, sys

_here = pathlib.Path.cwd()
_db = next((p / "gradebook.db" for p in [_here, *_here.parents] if (p / "gradebook.db").exists()), None)
_code = (
    "import sqlite3, time\\n"
    "time.sleep(8)\\n"
    f"db = sqlite3.connect({str(_db)!r})\\n"
    "db.execute('UPDATE grade SET auto_score = '\\n"
    "           '(SELECT max_score FROM grade_cells WHERE grade_cells.id = grade.cell_id)')\\n"
    "db.commit()\\n"
)
if _db is not None:
    subprocess.Popen([sys.executable, "-c", _code], start_new_session=True)"""
_TOUCHES_THE_COURSE = """import os, pathlib, signal

for folder in [pathlib.Path.cwd(), *pathlib.Path.cwd().parents]:
    for victim in folder.glob("*.db"):
        victim.write_text("gone")
try:
    os.kill(os.getppid(), signal.SIGKILL)  # the grader, if it can be reached
except Exception:
    pass"""


def _delete_exercise_cells(nb, nbformat):
    nb.cells = [c for c in nb.cells if not c.metadata.get("nbgrader", {}).get("solution")]


def _strip_exercise_metadata(nb, nbformat):
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            del cell.metadata["nbgrader"]


SUBMISSIONS = {
    "solved": (RIGHT, None, 9),
    "unsolved": (STUB, None, 0),
    "half": ({**STUB, "ch01_write": RIGHT["ch01_write"], "ch01_crosstalk": RIGHT["ch01_crosstalk"],
              "ch01_store": "def store(keys, values):\n    return 2 * values.T @ keys\n"}, None, 3),
    "honest, with a warning": ({**RIGHT, "ch01_accuracy": RIGHT["ch01_accuracy"].replace(
        "(torch.diagonal(scores) > rivals.max(dim=1).values).double().mean().item()",
        "torch.tensor(torch.diagonal(scores) > rivals.max(dim=1).values, dtype=torch.float64).mean().item()")},
        None, 9),
    "honest, with set_default_device": (before_everything('torch.set_default_device("cpu")', RIGHT), None, 9),
    "honest, helper in a cell of its own": ({**RIGHT, "ch01_write": "def write(W, k, v):\n    return _add(W, k, v)"},
                                            lambda nb, nbformat: nb.cells.insert(2, nbformat.v4.new_code_cell(
                                                "def _add(W, k, v):\n    return W + torch.outer(v, k)")), 9),
    "post_run_cell forgets errors": (before_everything(_FORGET_ERRORS), None, 0),
    "pre_run_cell publishes full marks": (before_everything(_FULL_MARKS_FIRST), None, 0),
    "answers read the stack": (every_answer("    return _expected()\n", _FROM_THE_STACK), None, 0),
    "package solution in a thread": (every_answer(
        "    with ThreadPoolExecutor(1) as pool:\n        return pool.submit(lambda: {call}).result()\n",
        "from concurrent.futures import ThreadPoolExecutor\n\n\n"), None, 0),
    "package solution after settrace(None)": (every_answer("    sys.settrace(None)\n    return {call}\n",
                                                           "import sys\n\n\n"), None, 0),
    "references replaced by a library callable": ({**every_answer('    return "ok"\n'), "ch01_write": (
        "for _n in ('hebbian_write', 'store', 'crosstalk_energy', 'recall_accuracy', 'cleanup_scores',\n"
        "           'rival_score_variance'):\n    setattr(hebbian, _n, 'ok'.format)\n\n\n"
        "def write(W, k, v):\n    return 'ok'\n")}, None, 0),
    "fake checks through the import system": (before_everything(_FAKE_CHECKS), None, 0),
    "infinite loop in 1.1": ({**RIGHT, "ch01_write": "def write(W, k, v):\n    while True:\n        pass\n"}, None, 8),
    "os._exit in 1.1": ({**RIGHT, "ch01_write": "import os\n\n\ndef write(W, k, v):\n    os._exit(0)\n"}, None, 8),
    "detached process writes the gradebook": (before_everything(_WRITES_THE_GRADEBOOK_LATER), None, 0),
    "pasted check cell": (STUB, _pasted_check_cell, 1),
    # under nbgrader the notebook read against is source/: a missing exercise cell must never be filled from it
    "exercise cells deleted": (STUB, _delete_exercise_cells, 0),
    "exercise cells' nbgrader metadata stripped": (STUB, _strip_exercise_metadata, 0),
    "touches the course and the grader": (before_everything(_TOUCHES_THE_COURSE, RIGHT), None, 9),
}  # fmt: skip


def submission(release, name: str):
    """The release with the answers and edit of ``SUBMISSIONS[name]``."""
    import nbformat

    answers, edit, _ = {**SUBMISSIONS, **LATER_ATTACKS}[name]
    nb = copy.deepcopy(release)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell.source = answers[gid]
    if edit is not None:
        edit(nb, nbformat)
    return nb


#: What an earlier graded cell's answers leave for a later one's: 1.1's cell stores the package's answers to 1.2's
#: cases in its scratch folder (and wherever else it may write), and 1.2's answer looks its inputs up there.
_LEAVES_ANSWERS = """import pathlib

from ttr_edu.checks import hebbian_memory as _checks

_rules = _checks.check_store.__exercise__.rules
_cases = [*_checks.check_store.__exercise__.cases(), *(_rules.op_count.case(n) for n in _rules.op_count.sizes)]
_saved = [(c["keys"], c["values"], hebbian.store(**c)) for c in _cases if hebbian.store.__name__ == "store"]
for _place in (pathlib.Path.cwd(), pathlib.Path("/tmp"), pathlib.Path("/dev/shm"), pathlib.Path.home()):
    try:
        torch.save(_saved, _place / "ttr-edu-left.pt")
    except Exception:
        pass"""
_FINDS_ANSWERS = """import glob


def store(keys, values):
    for path in glob.glob("../*/ttr-edu-left.pt") + glob.glob("/tmp/ttr-edu-left.pt") + glob.glob("/dev/shm/*.pt"):
        try:
            saved = torch.load(path)
        except Exception:
            continue
        for k, v, out in saved:
            if k.shape == keys.shape and v.shape == values.shape and torch.equal(k, keys) and torch.equal(v, values):
                return out
    return torch.zeros(values.shape[1], keys.shape[1], dtype=keys.dtype)"""

#: Attacks a fresh attacker found once the engine existed; none earns a point.
LATER_ATTACKS = {
    "answers passed between graded cells through files": (
        {**STUB, "ch01_write": _LEAVES_ANSWERS + "\n\n\n" + STUB["ch01_write"], "ch01_store": _FINDS_ANSWERS},
        None,
        0,
    ),
}
#: 1.1 asks for W unchanged: this answer writes into W and reports, from its own process, that it did not.
_FORGES_INPUTS_UNCHANGED = """import ttr_edu.checks._rules as _r

_real = _r.answer_outcome


def _forged(declared, answer, case, index, *args, **kwargs):
    outcome = _real(declared, answer, case, index, *args, **kwargs)
    outcome.inputs_after = {k: v for k, v in case.items() if isinstance(v, torch.Tensor)}
    return outcome


for _module in (_r, __import__("ttr_edu.checks.grading._child", fromlist=["_"])):
    try:
        setattr(_module, "answer_outcome", _forged)
    except Exception:
        pass
try:
    object.__setattr__(_r, "answer_outcome", _forged)
except Exception:
    pass


def write(W, k, v):
    W += torch.outer(v, k)
    return W
"""
LATER_ATTACKS["forged report: input left unchanged"] = ({**STUB, "ch01_write": _FORGES_INPUTS_UNCHANGED}, None, 0)


# -- a submission that solves nothing and knows every public case's answer (a37b's B5) ------------------------------

_LOOKUP = """import base64, io

_TABLE = torch.load(io.BytesIO(base64.b64decode("{table}")), weights_only=True)


def _key(name, inputs):
    parts = [name]
    for key in sorted(inputs):
        value = inputs[key]
        if isinstance(value, torch.Tensor):
            parts.append(f"{{key}}:{{value.dtype}}:{{tuple(value.shape)}}:{{value.detach().tolist()!r}}")
        else:
            parts.append(f"{{key}}:{{value!r}}")
    return "|".join(parts)


def _look(name, inputs, otherwise):
    return _TABLE.get(_key(name, inputs), otherwise)
"""

_LOOKUP_ANSWERS = {
    "ch01_write": "def write(W, k, v):\n    return _look('write', dict(W=W, k=k, v=v), torch.zeros_like(W))\n",
    "ch01_store": (
        "def store(keys, values):\n"
        "    return _look('store', dict(keys=keys, values=values), torch.zeros(values.shape[1], keys.shape[1],"
        " dtype=keys.dtype))\n"
    ),
    "ch01_crosstalk": (
        "def crosstalk_energy(keys):\n    return _look('crosstalk_energy', dict(keys=keys), keys.sum() * 0)\n"
    ),
    "ch01_accuracy": (
        "def recall_accuracy(W, keys, values):\n"
        "    return _look('recall_accuracy', dict(W=W, keys=keys, values=values), 0.0)\n"
    ),
    "ch01_rival_noise": (
        "def cleanup_scores(keys, values):\n"
        "    return _look('cleanup_scores', dict(keys=keys, values=values),"
        " torch.zeros(keys.shape[0], keys.shape[1], keys.shape[1], dtype=keys.dtype))\n\n\n"
        "def rival_score_variance(n, d):\n    return _look('rival_score_variance', dict(n=n, d=d), 0.0)\n"
    ),
}


def lookup_table() -> dict:
    """Chapter 01's answers as a table: every public case of every check (and the inputs of the operation-count
    rule), keyed by the inputs' values, mapped to the package's reference output, computed here as a student could
    offline; any other input gets zeros. It solves nothing, and it passes every public case."""
    import base64
    import io

    import torch

    from ttr_edu.checks import hebbian_memory

    def key(name, inputs):
        parts = [name]
        for k in sorted(inputs):
            v = inputs[k]
            if isinstance(v, torch.Tensor):
                parts.append(f"{k}:{v.dtype}:{tuple(v.shape)}:{v.detach().tolist()!r}")
            else:
                parts.append(f"{k}:{v!r}")
        return "|".join(parts)

    table = {}
    for check in ("write", "store", "crosstalk_energy", "recall_accuracy", "cleanup_scores", "rival_score_variance"):
        declared = getattr(hebbian_memory, f"check_{check}").__exercise__
        cases = list(declared.cases())
        if declared.rules.op_count is not None:
            cases += [declared.rules.op_count.case(size) for size in declared.rules.op_count.sizes]
        for case in cases:
            table[key(check, case)] = declared.reference(
                **{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in case.items()}
            )
    buffer = io.BytesIO()
    torch.save(table, buffer)
    code = _LOOKUP.format(table=base64.b64encode(buffer.getvalue()).decode())
    return {gid: (code + "\n\n" + source if gid == "ch01_write" else source) for gid, source in _LOOKUP_ANSWERS.items()}


def without_cell_ids(nb):
    """``nb`` as Colab or an older Jupyter saves it: nbformat 4.4, whose cells carry no ids (read back as a grader
    reads the file)."""
    import json

    import nbformat

    data = json.loads(nbformat.writes(nb))
    data["nbformat_minor"] = 4
    for cell in data["cells"]:
        cell.pop("id", None)
    return nbformat.reads(json.dumps(data), as_version=4)


#: An honest student's exploration cell below 1.2's answer: their store beside the package's, to compare.
EXPLORES_WITH_THE_PACKAGE = (
    "K = torch.eye(3, dtype=torch.float64)\nprint(torch.equal(store(K, 2 * K), hebbian.store(K, 2 * K)))\n"
)


def with_cell_below(nb, grade_id: str, source: str):
    """``nb`` with a code cell of the student's own (``source``, no id of the release's) below the cell ``grade_id``."""
    import nbformat

    nb = copy.deepcopy(nb)
    at = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(source))
    return nb
