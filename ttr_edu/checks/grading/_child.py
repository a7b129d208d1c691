"""The answers' process, inside the sandbox: the setup cells once, then one forked process per graded cell.

This process (the *fork server*) never runs the student's code. It reads the job (JSON on stdin), runs the release's
setup cells, builds each exercise's cases, and for each graded cell forks a child that

1. limits its memory and CPU time, points its output at a log, keeps only its own pipes;
2. locks itself down for the exercises of that cell (:func:`ttr_edu.checks._guard.lock_down`): from here on the
   forbidden callables are gone and the audit hook refuses what would bring them back;
3. runs the student's cells above the graded cell (exercise cells and cells of their own; a call of what the lock-down
   removed raises :class:`NotGiven` in the cell that made it), calls each answer on each case
   (:func:`ttr_edu.checks._rules.answer_outcome`; a call of what was removed now ends the process with the rule's
   message) and writes what it gave as plain tensors (``torch.save``);
4. asks for the graded cell's hidden tests, if any, once its answers have all reported (until then no hidden test is in
   its memory: right after the fork, before any student code, it drops every graded cell's hidden tests and the other
   graded cells' cases and exercises), runs them, reports their error's type and line only, and ends with
   ``os._exit``.

For a fresh case and a counted rule's calls the fork server draws the inputs only when the child asks for them, from a
secret of its own drawn after the fork, one call at a time. A child that runs past its time is killed; one that dies is
reported as such; either costs that graded cell alone. Its time is two budgets: the student's cells above the graded
cell share the notebook's ``cells_timeout`` (at least ``timeout`` per graded cell; the child names each cell as it
starts it, so a timeout there names the cell), and the answers get ``timeout`` from the moment the child says its cells
are done (``cells_done``).

Frames (both pipes): two big-endian 32-bit lengths, a JSON header, a payload (``torch.save`` bytes or nothing).
"""

from __future__ import annotations

import _thread
import io
import json
import linecache
import os
import resource
import selectors
import signal
import struct
import sys
import time
import traceback
from pathlib import Path
from typing import Any

#: The most a child may send back for one graded cell (outcomes of every case), and of its log.
MAX_FRAME = 64 << 20
MAX_LOG = 64 << 10
#: Exit status of a child that broke a rule (it reported which first).
RULE_EXIT = 86


class NotGiven(RuntimeError):
    """Raised in a student's cell (above the answers) that calls what the lock-down removed: the cell stops there
    with this error; the answers are not affected."""


def write_frame(fd: int, header: dict, payload: bytes = b"") -> None:
    data = memoryview(_frame(header, payload))
    while data:
        data = data[os.write(fd, data) :]


class FrameReader:
    """Frames from a byte stream fed in pieces; :meth:`frames` yields ``(header, payload)`` once complete. A frame
    larger than :data:`MAX_FRAME` or a header that is not a JSON object raises ValueError."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self.buffer += data

    def frames(self):
        while len(self.buffer) >= 8:
            head, size = struct.unpack(">II", self.buffer[:8])
            if head > MAX_FRAME or size > MAX_FRAME:
                raise ValueError("a frame larger than the grader reads")
            if len(self.buffer) < 8 + head + size:
                return
            header = json.loads(bytes(self.buffer[8 : 8 + head]))
            payload = bytes(self.buffer[8 + head : 8 + head + size])
            del self.buffer[: 8 + head + size]
            if not isinstance(header, dict):
                raise ValueError("a frame header that is not an object")
            yield header, payload


def _python_source(source: str) -> str:
    """A cell's code as Python (IPython magics become calls of the stand-in ``get_ipython``)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(source)
    except Exception:  # no IPython, or a cell it cannot read: compile reports it
        return source


#: cell magics that run their cell's code in the notebook's namespace (and time or capture it): run here, once
_RUNS_ITS_BODY = ("time", "timeit", "capture", "prun")


class _NoShell:
    """``get_ipython()`` for cells run outside a kernel: magics, events and display calls do nothing, but for the
    cell magics that run their cell's code (``%%time`` over a solved cell: its functions must still be defined)."""

    def __init__(self, namespace: dict | None = None) -> None:
        object.__setattr__(self, "_namespace", namespace)

    def __getattr__(self, name: str) -> _NoShell:
        return self

    def __call__(self, *args, **kwargs) -> _NoShell:
        return self

    def run_cell_magic(self, magic: str, line: str, cell: str) -> None:
        if magic in _RUNS_ITS_BODY and self._namespace is not None:
            exec(compile(_python_source(cell), f"<%%{magic} cell>", "exec"), self._namespace)


def _run_cell(source: str, name: str, namespace: dict) -> str | None:
    """Run one cell's code in ``namespace``; the error it raised, formatted for the student, or None. The cell's code
    is kept where :mod:`inspect` finds it, as IPython keeps it, so a rule read from an answer's source (a Triton
    kernel's, :attr:`ttr_edu.checks._rules.Rules.source`) reads it here as in the student's kernel."""
    code = _python_source(source)
    linecache.cache[name] = (len(code), None, code.splitlines(keepends=True), name)
    try:
        exec(compile(code, name, "exec"), namespace)  # the point of this process
    except BaseException as err:  # SystemExit included: a cell cannot end the grading
        where = traceback.extract_tb(err.__traceback__)
        line = next((f" (line {f.lineno})" for f in reversed(where) if f.filename == name), "")
        return f"{type(err).__name__}: {err}{line}"
    return None


# -- the child (one graded cell) ---------------------------------------------------------------------------------------


def _plain_bytes(value: Any) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _child(
    job: dict, unit: dict, namespace: dict, declared: dict, results: int, control: int, scratch: Path, shared: dict
) -> None:
    """The forked child of one graded cell. Never returns."""
    from ttr_edu.checks import _rules
    from ttr_edu.checks._guard import Forbidden, lock_down, package_dirs
    from ttr_edu.checks.grading import sandbox
    from ttr_edu.checks.grading._no_processes import die_with_parent, drop_privileges, forbid_new_processes

    # While the student's cells run (above the answers), what the lock-down removed raises NotGiven in the cell that
    # called it: an exploration cell that calls the package's solution (``hebbian.store(keys, values)``, to compare)
    # or an edited experiment cell costs that cell, named as its error, and none of the answers. From the first call
    # of an answer on, such a call ends the process with the rule's message. Either way the removed function never
    # runs: turning this switch back (it is reachable from the answers) trades the rule's message for an exception
    # the answer catches, and gives it no value of the removed function.
    cells_running = [True]

    def end(message: str):
        if cells_running[0]:
            raise NotGiven(
                f"{message} (the grader runs your cells with it removed: this cell stops here, and your answers lose "
                "nothing unless they call it)"
            )
        write_frame(results, {"type": "rule", "message": str(message)})
        os._exit(RULE_EXIT)

    import torch

    torch.set_num_threads(1)  # a fork may not use an OpenMP pool its parent started: one intra-op thread
    budget = int(job["memory_bytes"])
    with open("/proc/self/statm") as f:
        mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (mapped + budget, mapped + budget))
    # CPU time: the student's cells' share of the notebook's budget for them, then the answers' own ``timeout``
    # (lowered to that once the cells have run, below)
    cpu = int(float(job["_cells_allowed"]) + float(job["timeout"])) + 5
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FRAME, MAX_FRAME))
    # before any of the answer's code, below the audit hook (which pure Python that writes memory can empty): the
    # grader's privileges given up (as root, without bubblewrap, the answer could read the grader's memory and kill it),
    # tied to the fork server's life (a change of credentials clears that tie, so it comes after), no new process (an
    # interpreter started without the audit hook would compute the answer), no signal but to itself, no reading of
    # another's memory; where the kernel cannot, the log says so (grading.md, what holds where)
    readable = [str(path) for path in sandbox._needed()]
    held = drop_privileges(readable, str(scratch), switch_user=not job.get("private"))
    if held is not None:
        print(f"ttr-edu grader: {held}", file=sys.stderr)
    if not die_with_parent(int(job["_server"])):
        os._exit(0)
    unfiltered = forbid_new_processes()
    if unfiltered is not None:
        print(f"ttr-edu grader: {unfiltered}; new processes are refused only by the audit hook", file=sys.stderr)
    bad = Forbidden()
    for exercise in declared.values():
        if exercise is not None and not isinstance(exercise, _rules.Staged):  # a staged check traces its own calls
            bad = bad | exercise.forbidden(solver_modules=list(_SOLVER_MODULES))
    # the allow-list: where every exercise of this cell is declared (a staged one only if it `empties`: 13.2 builds
    # the package's objects beside the answer here, so its allow-list is held by the call trace around each of the
    # answer's calls instead, Staged.held_to), the package's functions none of them gives are emptied before the
    # student's cells run (a check of the older kind calls its reference here, so none is applied where one stands)
    given = None
    if declared and all(e is not None and getattr(e, "empties", True) for e in declared.values()):
        given = [value for exercise in declared.values() for value in exercise.given]
    lock_down(bad, end=end, scratch=scratch, code_dirs=package_dirs(), given=given, package=job.get("_package"))
    traced = not bad  # nothing removed: the lock-down leaves a call trace to a staged check
    del bad, given
    errors = {}
    for name, source in job["cells"][: int(unit["upto"])]:
        write_frame(results, {"type": "cell", "name": name})  # the fork server names it if time runs out in it
        errors[name] = _run_cell(source, f"<{name}>", namespace)
    cells_running[0] = False
    # the student's cells have run: from here on the answers' own time (the fork server starts their deadline now)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = min(cpu, int(usage.ru_utime + usage.ru_stime + float(job["timeout"])) + 5)
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    except (ValueError, OSError):  # a cell lowered the hard limit below this already: the lower one holds
        pass
    write_frame(results, {"type": "cells_done"})
    if any(errors.values()):
        write_frame(results, {"type": "cell_errors", "errors": {k: v for k, v in errors.items() if v}})
    if any(isinstance(e, _rules.Staged) for e in declared.values()) and _thread._count() > 0:  # threads but main
        # a staged check traces the calls of the answer and of the threads it starts; a thread the cells started
        # before runs untraced (an attacker's ran the framework there), and this process started none of its own
        end(
            "your cells left a Python thread running; the check follows your function's calls and the threads it "
            "starts itself, so stop that thread (or start it inside your function)"
        )
    for check in unit["checks"]:
        name = check["check"]
        exercise = declared.get(name)
        try:
            answer = eval(check["expression"], namespace)  # the release's own expression, e.g. "write"
        except Exception as err:  # e.g. an input the answer turned into an object of its own
            write_frame(results, {"type": "missing", "check": name, "message": f"{type(err).__name__}: {err}"})
            continue
        if exercise is None:
            _legacy(results, check, answer)
            continue
        if isinstance(exercise, _rules.Staged):
            _staged(results, check, exercise, answer, traced=traced)
            continue
        if int(check.get("arguments", 1)) != 1:  # a declared check takes the answer alone (the grader says so)
            continue
        for index, case in enumerate(job["_cases"][name]):
            given = shared.get(name, {}).get(index)  # inputs the fork server reads back after this process ends
            outcome = _rules.answer_outcome(exercise, answer, case, index, given=given)
            write_frame(results, {"type": "outcome", "check": name, "case": index}, _outcome_bytes(outcome))
            if outcome.not_attempted:
                break
        else:
            if name in job.get("_fresh", ()):
                _fresh_calls(results, control, name, exercise, answer, int(job.get("fresh", 1)))
            if exercise.rules.op_count is not None:
                _op_counts(results, control, name, exercise, answer)
            if exercise.rules.work:
                _work_counts(results, control, name, exercise, answer)
    if unit["hidden"]:  # only now, every answer reported, does this process get the hidden tests
        write_frame(results, {"type": "hidden_ready"})
        hidden = _read_one(control, FrameReader()).decode("utf-8")
        error = _run_hidden(hidden, f"<hidden tests {unit['grade_id']}>", namespace)
        write_frame(results, {"type": "hidden", **error})
    write_frame(results, {"type": "done"})
    os._exit(0)


def _run_hidden(source: str, name: str, namespace: dict) -> dict:
    """Run the hidden tests; what failed, as the error's type and line only (``{"error": None}`` when they passed):
    an error's text could carry the hidden tests' own code, which the student's answers called from them can read."""
    code = _python_source(source)
    try:
        exec(compile(code, name, "exec"), namespace)
    except BaseException as err:
        where = traceback.extract_tb(err.__traceback__)
        line = next((f.lineno for f in reversed(where) if f.filename == name), None)
        return {"error": type(err).__name__, "line": line}
    return {"error": None}


def _forget(job: dict, declared: dict, everything: dict, secrets: dict) -> None:
    """In a graded cell's child, before any of the student's code runs: drop from memory what that graded cell must
    not see, so that no frame or object reachable from the answers holds it (the fork server's frames and their locals,
    ``job`` among them, are all reachable through ``sys._getframe``): every graded cell's hidden tests (its own come
    over the control pipe once its answers have reported), the other graded cells' cases and exercises."""
    secrets.clear()
    for store in (job["_cases"], everything):
        for name in [n for n in store if n not in declared]:
            del store[name]


def _outcome_bytes(outcome) -> bytes:
    """An outcome as ``torch.save`` bytes of plain data only; what cannot be written that way is named instead."""
    from ttr_edu.checks import _rules

    try:
        return _plain_bytes(_rules.to_record(outcome)["outcome"])
    except Exception as err:
        message = f"the grader could not read back what your function left ({type(err).__name__})"
        return _plain_bytes({**_rules.Outcome(raised=message).as_dict()})


def _legacy(results: int, check: dict, answer: Any) -> None:
    """A check not yet declared for the engine: run here, in the answer's process (its verdict could be forged)."""
    import importlib

    from ttr_edu.checks import CheckFailed

    module = importlib.import_module(f"ttr_edu.checks.{check['module']}")
    arguments = answer if int(check.get("arguments", 1)) > 1 else (answer,)  # several: the expression's tuple
    try:
        status = "PASS" if getattr(module, check["check"])(*arguments) is True else "not attempted"
        message = ""
    except CheckFailed as failure:
        message = str(failure)
        status = "not attempted" if ": not attempted (the stub" in message else "FAIL"
    except Exception as err:
        status, message = "FAIL", f"{type(err).__name__}: {err}"
    write_frame(results, {"type": "legacy", "check": check["check"], "status": status, "message": message})


def _staged(results: int, check: dict, exercise, answer: Any, traced: bool) -> None:
    """A :class:`~ttr_edu.checks._rules.Staged` check, answer side: its arguments (plain data beside the answer, e.g.
    chapter 13's point) and the answer's outputs on the cases they give, sent as one plain record; the grader judges
    it. Its calls run under its own call trace where the lock-down left tracing on (``traced``: no other exercise of
    this graded cell removed callables)."""
    import contextlib
    import functools

    from ttr_edu.checks import _rules
    from ttr_edu.checks._guard import watching

    name = check["check"]
    try:
        arguments = exercise.arguments(*(answer if int(check.get("arguments", 1)) > 1 else (answer,)))
    except TypeError as err:
        write_frame(results, {"type": "missing", "check": name, "message": f"TypeError: {err}"})
        return
    guard = functools.partial(watching, exercise.held_to()) if traced else contextlib.nullcontext
    try:
        payload = _plain_bytes(_rules.to_record(exercise.collect(arguments, guard)))
    except Exception as err:  # the answer's objects broke the collection itself: the grader reads nothing
        write_frame(results, {"type": "staged", "check": name, "error": f"{type(err).__name__}: {err}"})
        return
    write_frame(results, {"type": "staged", "check": name}, payload)


def _rule_case(results: int, control: int, reader: FrameReader, header: dict) -> dict:
    """Ask the fork server for the inputs of one counted call (``header``: ``ops_ready`` or ``work_ready``) and read
    them: drawn there only now, after this process was forked, from a secret this process never sees."""
    import torch

    write_frame(results, header)
    return torch.load(io.BytesIO(_read_one(control, reader)), weights_only=True)


def _op_counts(results: int, control: int, name: str, exercise, answer) -> None:
    """The answer on the :class:`~ttr_edu.checks._rules.OpCount` rule's sizes, with its torch operations counted here
    (in the answer's process: the count is what this process reports, see grading.md); the grader judges the counts
    and the values. The inputs at each size are drawn afresh by the fork server (:func:`_rules.rule_case`), one call
    at a time, so no table of the rule's public inputs answers them."""
    from ttr_edu.checks import _rules

    reader = FrameReader()
    for size in exercise.rules.op_count.sizes:
        case = _rule_case(results, control, reader, {"type": "ops_ready", "check": name, "size": size})
        outcome = _rules.answer_outcome(exercise, answer, case, -1, count_ops=True)
        write_frame(results, {"type": "ops_outcome", "check": name, "size": size}, _outcome_bytes(outcome))


def _work_counts(results: int, control: int, name: str, exercise, answer) -> None:
    """The calls of the :class:`~ttr_edu.checks._rules.WorkCount` rules, each at its sizes on inputs the fork server
    draws afresh (as for :func:`_op_counts`), their work counted in the answer's process (as the operation counts
    are, see grading.md); the grader judges the work and the values."""
    from ttr_edu.checks import _rules

    reader = FrameReader()
    for index, rule in enumerate(exercise.rules.work):
        for size in rule.sizes:
            header = {"type": "work_ready", "check": name, "rule": index, "size": size}
            case = _rule_case(results, control, reader, header)
            outcome = _rules.answer_outcome(exercise, answer, case, -1, count_work=True)
            header = {"type": "work_outcome", "check": name, "rule": index, "size": size}
            write_frame(results, header, _outcome_bytes(outcome))


def _fresh_calls(results: int, control: int, name: str, exercise, answer, count: int) -> None:
    """The fresh-case protocol, child side: ask for a case no one has seen (drawn by the fork server only now, after
    this process was forked), answer it, report what it gave; ``count`` times. The case comes from the fork server,
    which never runs the student's code, so it is read with ``weights_only=False`` (some cases hold modules)."""
    import torch

    from ttr_edu.checks import _rules

    reader = FrameReader()
    for _ in range(count):
        write_frame(results, {"type": "fresh_ready", "check": name})
        drawn = torch.load(io.BytesIO(_read_one(control, reader)), weights_only=False)
        outcome = _rules.answer_outcome(exercise, answer, drawn["case"], int(drawn["index"]))
        write_frame(results, {"type": "fresh_outcome", "check": name}, _outcome_bytes(outcome))


def _read_one(fd: int, reader: FrameReader) -> bytes:
    while True:
        for _, payload in reader.frames():
            return payload
        data = os.read(fd, 1 << 20)
        if not data:
            os._exit(0)
        reader.feed(data)


# -- the fork server ---------------------------------------------------------------------------------------------------

_SOLVER_MODULES = ("numpy.linalg", "scipy.linalg", "scipy.sparse.linalg")
#: What a child reports (and the fork server passes on); the fork server's own reports are other kinds.
_RELAYED = {
    "outcome",
    "fresh_outcome",
    "ops_outcome",
    "work_outcome",
    "legacy",
    "staged",
    "missing",
    "cell_errors",
    "hidden",
    "rule",
    "harness_error",
    "done",
}


def _serve_unit(
    out: int,
    job: dict,
    index: int,
    unit: dict,
    namespace: dict,
    declared: dict,
    scratch: Path,
    everything: dict | None = None,
    secrets: dict | None = None,
) -> None:
    """Fork the child of one graded cell, relay what it reports, end it. ``everything``: every graded cell's exercises;
    ``secrets``: graded cell index -> its hidden tests, sent to the child once its answers have reported; what the
    child reports after that is dropped but for the hidden tests' verdict."""
    everything = declared if everything is None else everything
    secrets = {} if secrets is None else secrets
    results_r, results_w = os.pipe()
    control_r, control_w = os.pipe()
    log_r, log_w = os.pipe()
    folder = scratch / f"cell-{index}-{os.urandom(8).hex()}"
    folder.mkdir(mode=0o700)  # fresh and empty: nothing an earlier graded cell wrote is here
    from secrets import randbits

    from ttr_edu.checks._rules import Staged, changed_inputs, fresh_case, rule_case, shared_inputs

    shared = {  # check -> case index -> the inputs, in memory shared with the child: read back here, never reported
        name: {i: shared_inputs(case) for i, case in enumerate(job["_cases"][name])}
        for name, exercise in declared.items()
        if exercise is not None and not isinstance(exercise, Staged) and exercise.rules.inputs_unchanged
    }
    started = time.monotonic()
    job["_server"] = os.getpid()  # the child's parent, as the child checks once it is tied to its life
    # the student's cells above this graded cell may take what is left of the notebook's budget for them (at least
    # the answers' own timeout); the answers' deadline starts once they have run (``cells_done``)
    cells_left = float(job.get("_cells_left", job.get("cells_timeout", 0.0)))
    job["_cells_allowed"] = max(cells_left, float(job["timeout"]))
    pid = os.fork()
    if pid == 0:  # the child
        try:
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(log_w, 1)
            os.dup2(log_w, 2)
            for fd in (out, results_r, control_w, log_r, log_w, null):
                os.close(fd)
            os.chdir(folder)
            for variable in ("HOME", "TMPDIR"):
                os.environ[variable] = str(folder)
            import tempfile

            tempfile.tempdir = str(folder)
            _forget(job, declared, everything, secrets)
            _child(job, unit, namespace, declared, results_w, control_r, folder, shared)
        except BaseException:  # a failure of the harness itself: say so, then end
            try:
                write_frame(results_w, {"type": "harness_error", "message": traceback.format_exc()[-2000:]})
            finally:
                os._exit(70)
    for fd in (results_w, control_r, log_w):
        os.close(fd)
    os.set_blocking(control_w, False)
    reader, log, pending = FrameReader(), bytearray(), bytearray()
    selector = selectors.DefaultSelector()
    selector.register(results_r, selectors.EVENT_READ, "results")
    selector.register(log_r, selectors.EVENT_READ, "log")
    deadline = started + float(job["_cells_allowed"])
    running, cells_done = None, None  # the student's cell running now; when the student's cells were done
    status, relayed, hidden_sent, heard = None, 0, False, set()
    fresh: dict[
        str, list[int]
    ] = {}  # check -> the secrets of its fresh cases, drawn now (after the fork), one per call
    awaiting: set[str] = set()  # checks whose fresh case was sent and not answered yet
    # (kind, check, rule, size) -> the secret of a counted rule's inputs, drawn now (after the fork), one per call; the
    # call whose inputs were sent and not answered yet (one at a time: the answer never holds the inputs of a later
    # counted call while an earlier one is counted, where it could compute the later one's result)
    counted: dict[tuple[str, str, int, int], int] = {}
    outstanding: tuple[str, str, int, int] | None = None
    while status is None and (results_r in selector.get_map() or log_r in selector.get_map()):
        left = deadline - time.monotonic()
        if left <= 0:
            status = "timeout" if cells_done is not None else "cells_timeout"
            break
        for key, _ in selector.select(timeout=min(left, 1.0)):
            if key.data == "control":
                pending = pending[os.write(control_w, pending) :]
                if not pending:
                    selector.unregister(control_w)
                continue
            data = os.read(key.fd, 1 << 20)
            if not data:
                selector.unregister(key.fd)
                continue
            if key.data == "log":
                log += data[: max(0, MAX_LOG - len(log))]
                continue
            reader.feed(data)
            try:
                for header, payload in reader.frames():
                    kind = header.get("type")
                    if kind == "cell":  # the student's cell that runs now (named if their time runs out in it)
                        running = str(header.get("name", ""))[:200] if cells_done is None else running
                        continue
                    if cells_done is None:  # the cells are done (or something else spoke first): the answers'
                        cells_done = time.monotonic()  # own deadline starts now
                        deadline = cells_done + float(job["timeout"])
                    if kind == "cells_done":
                        continue
                    if kind in ("ops_ready", "work_ready"):  # a counted call's inputs, drawn only now, here
                        check, size = str(header.get("check")), int(header.get("size", 0))
                        rule_index = int(header.get("rule", 0)) if kind == "work_ready" else 0
                        exercise, rules = declared.get(check), []
                        if exercise is not None and not isinstance(exercise, Staged):
                            rules = [exercise.rules.op_count] if kind == "ops_ready" else list(exercise.rules.work)
                        rule = rules[rule_index] if 0 <= rule_index < len(rules) else None
                        asked = (kind.removesuffix("_ready"), check, rule_index, size)
                        busy = outstanding is not None or awaiting
                        if rule is None or size not in rule.sizes or asked in counted or busy:
                            raise ValueError("counted inputs the grader did not offer")
                        counted[asked] = randbits(63)
                        outstanding = asked
                        if not pending:
                            selector.register(control_w, selectors.EVENT_WRITE, "control")
                        pending += _frame({}, _plain_bytes(rule_case(rule, size, counted[asked])))
                        continue
                    if kind == "fresh_ready":  # a case no one has seen: its secret drawn only now, in this process
                        check = str(header.get("check"))
                        drawn = fresh.setdefault(check, [])
                        if check not in job.get("_fresh", ()) or check not in declared or check in awaiting:
                            raise ValueError("a fresh case the grader did not offer")
                        if outstanding is not None:  # one call's inputs at a time
                            raise ValueError("a fresh case while counted inputs are out")
                        if len(drawn) >= int(job.get("fresh", 1)):
                            raise ValueError("more fresh cases than the grader offers")
                        drawn.append(randbits(63))
                        where, case = fresh_case(declared[check], drawn[-1], job["_cases"][check])
                        awaiting.add(check)
                        if not pending:
                            selector.register(control_w, selectors.EVENT_WRITE, "control")
                        pending += _frame({}, _plain_bytes({"index": where, "case": case}))
                        continue
                    if kind == "hidden_ready":  # the child's answers have all reported: its hidden tests now
                        if hidden_sent or not secrets.get(index):
                            raise ValueError("hidden tests the grader did not offer")
                        hidden_sent = True
                        if not pending:
                            selector.register(control_w, selectors.EVENT_WRITE, "control")
                        pending += _frame({}, secrets[index].encode("utf-8"))
                        continue
                    if hidden_sent and kind not in ("hidden", "done"):
                        continue  # the answers had the hidden tests in memory by now: nothing else of theirs counts
                    if kind == "hidden" and not hidden_sent:  # a verdict on tests that were never sent: forged
                        raise ValueError("a hidden tests' verdict before the hidden tests were sent")
                    if kind == "outcome" and not 0 <= int(header.get("case", -1)) < len(job["_cases"][header["check"]]):
                        raise ValueError("an outcome of a case the grader does not have")
                    key = (kind, *(str(header.get(field)) for field in ("check", "case", "size", "rule")))
                    if kind != "fresh_outcome" and key in heard:  # the grader keeps the first
                        continue  # (a repeat costs memory)
                    heard.add(key)
                    if kind in ("ops_outcome", "work_outcome"):  # an answer to the counted inputs sent last
                        asked = (
                            kind.removesuffix("_outcome"),
                            str(header.get("check")),
                            int(header.get("rule", 0)) if kind == "work_outcome" else 0,
                            int(header.get("size", 0)),
                        )
                        if asked != outstanding:
                            raise ValueError("counted outputs for inputs the grader did not send")
                        outstanding = None
                        header["secret"] = counted[asked]
                    if kind == "fresh_outcome":  # an answer to the case sent last, which only this process can name
                        check = str(header.get("check"))
                        awaiting.remove(check)  # KeyError (garbled) for an answer to a case never sent
                        header["secret"] = fresh[check][-1]
                    if kind not in _RELAYED:
                        raise ValueError(f"a report of a kind the child does not send ({str(kind)[:40]!r})")
                    relayed += len(payload)
                    if relayed > 4 * MAX_FRAME:
                        raise ValueError("more output than the grader reads")
                    header["unit"] = index
                    write_frame(out, header, payload)
            except (ValueError, KeyError, TypeError, AttributeError, OSError) as err:
                status = f"garbled: {type(err).__name__}: {err}"
                break
    selector.close()
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _, code, usage = os.wait4(pid, 0)
    for fd in (results_r, control_w, log_r):
        os.close(fd)
    _wipe([scratch, *map(Path, job.get("private", []))])  # nothing a graded cell wrote reaches the next one
    cells_seconds = (cells_done if cells_done is not None else time.monotonic()) - started
    job["_cells_left"] = max(0.0, cells_left - cells_seconds)  # what the student's cells spent, off the budget
    for check, cases in shared.items():  # the rule "inputs unchanged", judged on what this process reads itself
        for case, given in cases.items():
            changed = changed_inputs(job["_cases"][check][case], given)
            write_frame(out, {"type": "inputs", "unit": index, "check": check, "case": case, "changed": changed})
    write_frame(
        out,
        {
            "type": "status",
            "unit": index,
            "status": status or f"exit {os.waitstatus_to_exitcode(code)}",
            "seconds": time.monotonic() - started,
            "cells_seconds": cells_seconds,
            "cells_allowed": float(job["_cells_allowed"]),
            "cells_budget": float(job.get("cells_timeout", 0.0)),
            "running": running if cells_done is None else None,
            "cpu": usage.ru_utime + usage.ru_stime,
            "peak_rss_mb": usage.ru_maxrss / 1024,
            "log": log.decode("utf-8", "replace"),
        },
    )


def _wipe(folders: list[Path]) -> None:
    """Empty ``folders`` (the scratch folder, and inside the sandbox its private ``/tmp`` and ``/dev/shm``), once the
    child of a graded cell has ended: the next graded cell's answers find nothing the earlier ones left there. The
    child's processes are all gone by now (it was killed, and what it started died with its process group or could
    not be started: the audit hook refuses it)."""
    import shutil

    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
            except OSError:
                pass


def _frame(header: dict, payload: bytes) -> bytes:
    head = json.dumps(header).encode()
    return struct.pack(">II", len(head), len(payload)) + head + payload


def main() -> None:
    """The fork server's entry point (``python -I -c ...`` inside the sandbox)."""
    from ttr_edu.checks.grading._no_processes import die_with_parent, hide_memory

    job = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    # before it holds any hidden test: its memory (/proc/<pid>/mem) closed to processes of the same user, the answers'
    # included (an attacker's answer rewrote the hidden tests there); the forks inherit it
    hide_memory()
    out = os.dup(1)
    # tied to the grader's life (an attacker's answer killed the grader, and its fork server went on grading): killed
    # with its parent from now on, and ended here if the grader is gone already (its end of the frames' pipe closed)
    import select

    poll = select.poll()
    poll.register(out, select.POLLOUT)
    if not die_with_parent() or any(event & (select.POLLERR | select.POLLHUP) for _, event in poll.poll(0)):
        os._exit(0)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # what the setup cells print goes nowhere; frames go to `out`
    scratch = Path(job["scratch"])
    os.chdir(scratch)
    import importlib

    import torch

    from ttr_edu.checks._rules import Staged, has_fresh

    torch.set_num_threads(1)
    namespace: dict = {"__name__": "__main__"}
    namespace["get_ipython"] = _NoShell(namespace)
    for i, source in enumerate(job["setup"]):
        error = _run_cell(source, f"<setup cell {i + 1}>", namespace)
        if error is not None:
            write_frame(out, {"type": "setup_error", "message": error})
            os._exit(0)
    torch.set_num_threads(1)  # whatever a setup cell set: one intra-op thread in the forks (fork-safe)
    declared, cases, solvers = {}, {}, False
    for unit in job["units"]:
        for check in unit["checks"]:
            module = importlib.import_module(f"ttr_edu.checks.{check['module']}")
            exercise = getattr(getattr(module, check["check"], None), "__exercise__", None)
            declared[check["check"]] = exercise
            if exercise is not None and not isinstance(exercise, Staged):  # a Staged check's cases are the grader's
                cases[check["check"]] = list(exercise.cases())
                solvers |= exercise.rules.no_solvers
    if solvers:  # loaded before the forks, so that their solvers are removed, not imported fresh afterwards
        for name in _SOLVER_MODULES:
            try:
                importlib.import_module(name)
            except ImportError:
                pass
    job["_cases"] = cases
    # the checks the grader draws a case no one has seen for (the engine decides the same with the same function)
    job["_fresh"] = sorted(name for name in cases if has_fresh(declared[name]))
    from ttr_edu.checks._guard import package_functions

    job["_package"] = package_functions()  # listed once, after the setup cells; each graded cell's process empties some
    del cases
    secrets = {}  # graded cell -> its hidden tests: kept here, out of the unit the child reads
    for index, unit in enumerate(job["units"]):
        secrets[index] = str(unit.get("hidden") or "")
        unit["hidden"] = bool(secrets[index])
    for index, unit in enumerate(job["units"]):
        mine = {c["check"]: declared[c["check"]] for c in unit["checks"]}
        _serve_unit(out, job, index, unit, namespace, mine, scratch, declared, secrets)
    write_frame(out, {"type": "end"})
    os._exit(0)
