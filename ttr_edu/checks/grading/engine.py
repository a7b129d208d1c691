"""The verdict engine: grade one submitted notebook in a process the student's code never runs in.

:func:`grade` plans what to run (:mod:`ttr_edu.checks.grading.notebook`), starts the answers' process in a sandbox
(:mod:`ttr_edu.checks.grading.sandbox`, :mod:`ttr_edu.checks.grading._child`), and reads back only plain data
(``torch.load(weights_only=True)``: tensors, numbers, strings, containers; no object of the student's). The cases,
the references, the comparisons and the rule verdicts run here, with the same code as the check in the student's
kernel (:func:`ttr_edu.checks._rules.judge_case`, :func:`~ttr_edu.checks._rules.judge_ops`,
:func:`~ttr_edu.checks._rules.judge_work`). A graded cell scores its points when every check it calls passes, and 0
otherwise. What goes wrong in one graded cell (a timeout, a process that died, a broken rule) costs that cell alone and
is named in :attr:`Report.problems`; nothing here raises for a submission, however broken.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ttr_edu.checks.grading import notebook, sandbox
from ttr_edu.checks.grading._child import MAX_FRAME, RULE_EXIT, FrameReader

if TYPE_CHECKING:
    import nbformat

__all__ = [
    "Verdict",
    "Report",
    "grade",
    "SandboxUnavailable",
    "DEFAULT_TIMEOUT",
    "DEFAULT_MEMORY_GB",
    "DEFAULT_CELLS_TIMEOUT",
]


class SandboxUnavailable(RuntimeError):
    """Grading was asked to run only inside bubblewrap (``require_sandbox``), and bubblewrap cannot start here."""


#: Seconds one graded cell's answers may run (all its cases), and the memory they may add, by default.
DEFAULT_TIMEOUT = 60.0
DEFAULT_MEMORY_GB = 4.0
#: Seconds the student's own cells may run in all, over the whole notebook, by default: each graded cell's process
#: runs every student cell above it again first, and that time is counted here, not in the answers' ``timeout``
#: (an honest notebook with one 65 s exploration cell below 1.1 lost every later point when it counted there, a37e).
DEFAULT_CELLS_TIMEOUT = 600.0
#: Seconds the answers' process may take to start and run the setup cells.
STARTUP_TIMEOUT = 180.0

_BOOT = "import sys; sys.path.insert(0, {root!r}); from ttr_edu.checks.grading._child import main; main()"


@dataclass
class Verdict:
    """One graded cell: ``status`` is ``PASS``, ``FAIL`` or ``not attempted``; ``detail`` the whole reason."""

    grade_id: str
    heading: str
    points: float
    status: str
    detail: str = ""

    @property
    def earned(self) -> float:
        return self.points if self.status == "PASS" else 0.0


@dataclass
class Report:
    """One notebook's verdicts, what a student or instructor should know about it, how it was contained, its cost."""

    verdicts: list[Verdict]
    problems: list[str] = field(default_factory=list)
    protection: str = ""
    seconds: float = 0.0

    @property
    def score(self) -> float:
        return sum(v.earned for v in self.verdicts)

    @property
    def max_score(self) -> float:
        return sum(v.points for v in self.verdicts)


@dataclass
class _Heard:
    """What the answers' process reported about one graded cell."""

    outcomes: dict[tuple[str, int], Any] = field(default_factory=dict)
    fresh: dict[str, list[tuple[Any, int]]] = field(default_factory=dict)
    ops: dict[tuple[str, int], Any] = field(default_factory=dict)
    work: dict[tuple[str, int, int], Any] = field(default_factory=dict)
    changed: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    legacy: dict[str, tuple[str, str]] = field(default_factory=dict)
    staged: dict[str, Any] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    cell_errors: dict[str, str] = field(default_factory=dict)
    hidden: str | None = None
    hidden_ran: bool = False
    rule: str | None = None
    harness: str | None = None
    #: a report the grader refused to read (e.g. a compressed one): the graded cell fails whatever else it reported
    garbled: str | None = None
    status: str | None = None
    log: str = ""
    #: the student's cell that was running when their cells' time ran out (``status == "cells_timeout"``), the seconds
    #: this graded cell's process gave them, and the notebook's budget for them
    running: str | None = None
    cells_allowed: float = 0.0
    cells_budget: float = 0.0


#: bytes of pickle (the structure around the tensors' data) one report may hold: unpickling costs time linear in them
MAX_PICKLE = 1 << 20


def _load(payload: bytes) -> Any:
    """Plain data from ``torch.save`` bytes the answers' process wrote. The zip is read first: ``torch.save`` stores
    its records uncompressed, so a compressed one, or records that would take more than :data:`MAX_FRAME` once read,
    are refused (ValueError) before ``torch.load`` inflates anything (a few hundred kB of deflated zeros would
    otherwise take gigabytes of the grader's memory); so is a structure of more than :data:`MAX_PICKLE` bytes. What
    ``torch.load`` gives is then walked once, bounded (:func:`~ttr_edu.checks._rules.plain_size`: a container met
    twice, too many items or too deep a nesting is refused), before anything else reads it: a few kB of pickle
    referencing one list many times would otherwise cost the grader minutes and gigabytes to expand."""
    import zipfile

    import torch

    from ttr_edu.checks._rules import plain_size

    try:
        with zipfile.ZipFile(io.BytesIO(payload)) as archive:
            records = archive.infolist()
    except (zipfile.BadZipFile, OSError, EOFError) as err:
        raise ValueError(f"a report that is not a torch.save archive ({type(err).__name__})") from err
    if any(r.compress_type != zipfile.ZIP_STORED for r in records):
        raise ValueError("a report with compressed records (torch.save writes none)")
    if sum(r.file_size for r in records) > MAX_FRAME or any(r.file_size != r.compress_size for r in records):
        raise ValueError("a report larger than the grader reads")
    if sum(r.file_size for r in records if r.filename.endswith(".pkl")) > MAX_PICKLE:
        raise ValueError("a report whose structure is larger than the grader reads")
    value = torch.load(io.BytesIO(payload), weights_only=True)
    plain_size(value)  # before anything walks it: a memo-shared list would expand there (ValueError)
    return value


def _outcome(payload: bytes):
    from ttr_edu.checks._rules import outcome_of

    return outcome_of(_load(payload))


def _listen(process: subprocess.Popen, checks: list[set[str]], deadline: float) -> tuple[dict[int, _Heard], str | None]:
    """Read the answers' process's frames until it ends or ``deadline``; what was heard per graded cell (``checks``:
    the checks each calls), and a problem with the whole run (setup failed, the process died or ran out of time)."""
    heard = {i: _Heard() for i in range(len(checks))}
    reader = FrameReader()
    fd = process.stdout.fileno()
    os.set_blocking(fd, False)
    problem = "the grading process ended before it finished"
    import selectors

    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return heard, "the grading of this notebook ran out of time"
            if not selector.select(timeout=min(left, 1.0)):
                continue
            data = os.read(fd, 1 << 20)
            if not data:
                return heard, problem
            reader.feed(data)
            for header, payload in reader.frames():
                if time.monotonic() > deadline:  # a burst of frames is read within the deadline too
                    return heard, "the grading of this notebook ran out of time"
                kind = header.get("type")
                if kind == "end":
                    return heard, None
                if kind == "setup_error":
                    return heard, f"the notebook's setup cells failed in the grader: {header.get('message')}"
                unit = header.get("unit")
                if not isinstance(unit, int) or unit not in heard:
                    continue
                _note(heard[unit], header, payload, checks[unit])


def _note(heard: _Heard, header: dict, payload: bytes, checks: set[str]) -> None:
    """Record one frame about a graded cell; what the answers' process wrote is untrusted and checked for shape (and
    kept only for the checks this graded cell calls)."""
    kind, check = header.get("type"), str(header.get("check", ""))
    if "check" in header and check not in checks:
        return
    try:
        if kind == "outcome":
            heard.outcomes.setdefault((check, int(header["case"])), _outcome(payload))
        elif kind == "fresh_outcome":  # the secret is the fork server's, added to the child's frame there
            calls = heard.fresh.setdefault(check, [])
            if len(calls) < 64:
                calls.append((_outcome(payload), int(header["secret"])))
        elif kind == "ops_outcome":  # the secret of its inputs is the fork server's, added to the child's frame there
            heard.ops.setdefault((check, int(header["size"])), (_outcome(payload), int(header["secret"])))
        elif kind == "work_outcome":
            key = (check, int(header["rule"]), int(header["size"]))
            heard.work.setdefault(key, (_outcome(payload), int(header["secret"])))
        elif kind == "inputs":  # the fork server's own reading of the inputs, never the answer's process's report
            heard.changed[check, int(header["case"])] = [str(k) for k in header["changed"]]
        elif kind == "legacy":
            heard.legacy.setdefault(check, (str(header.get("status")), str(header.get("message", ""))))
        elif kind == "staged" and check not in heard.staged:  # a record, or why the answer's process sent none
            error = header.get("error")
            heard.staged[check] = _load(payload) if error is None else str(error)
        elif kind == "missing":
            heard.missing.setdefault(check, str(header.get("message")))
        elif kind == "cell_errors" and isinstance(header.get("errors"), dict):
            heard.cell_errors.update({str(k): str(v) for k, v in header["errors"].items()})
        elif kind == "hidden" and not heard.hidden_ran:  # the error's type and line, never its text (see _child)
            error, line = header.get("error"), header.get("line")
            if error is not None:
                error = str(error) if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]{0,79}", str(error)) else "an error"
                error += f" (line {line})" if isinstance(line, int) and not isinstance(line, bool) else ""
            heard.hidden_ran, heard.hidden = True, error
        elif kind == "rule" and heard.rule is None:
            heard.rule = str(header.get("message"))
        elif kind == "harness_error":
            heard.harness = str(header.get("message"))
        elif kind == "status":
            heard.status, heard.log = str(header.get("status")), str(header.get("log", ""))[:65536]
            running = header.get("running")
            heard.running = str(running)[:200] if running is not None else None
            heard.cells_allowed = float(header.get("cells_allowed", 0.0))
            heard.cells_budget = float(header.get("cells_budget", 0.0))
    except (KeyError, TypeError, ValueError, RuntimeError, EOFError, OSError, AttributeError) as err:
        heard.harness = heard.harness or f"unreadable report from the answers' process ({type(err).__name__})"
        heard.garbled = heard.garbled or f"{type(err).__name__}: {str(err)[:200]}"


def _why_missing(heard: _Heard, timeout: float, index: int) -> str:
    """Why a case has no outcome: the answer broke a rule (the process ended there), ran out of time, or died."""
    if heard.rule is not None:
        return heard.rule
    if heard.harness is not None:
        return f"the grader could not run your function: {heard.harness.strip().splitlines()[-1]}"
    status = heard.status or "no report"
    if status == "timeout":
        return (
            f"your function took longer than {timeout:g} s (the grader stops an exercise there; the cells above it "
            "ran before that and are not counted in it)"
        )
    if status == "cells_timeout":
        where = heard.running or "one of your cells above this graded cell"
        return (
            f"{where} was still running when the time for your own cells ran out ({heard.cells_allowed:.0f} s here: "
            f"the cells of the whole notebook share {heard.cells_budget:.0f} s, and each graded cell runs every cell "
            "above it again first), so this graded cell's answers were not called; make that cell faster or move "
            "long experiments out of the notebook you hand in"
        )
    if status.startswith("exit "):
        code = status.removeprefix("exit ")
        if code == str(RULE_EXIT):
            return "your function ended its process as if it broke a rule, without saying which"
        if code.startswith("-"):
            name = signal.Signals(-int(code)).name if -int(code) in signal.Signals._value2member_map_ else code
            more = " (its CPU time ran out)" if name == "SIGXCPU" else " (out of memory?)" if name == "SIGKILL" else ""
            return f"the process running your function was killed by {name} on case {index}{more}"
        return (
            f"the process running your function ended (exit status {code}) on case {index}: does your code call "
            "os._exit, sys.exit or exit()?"
        )
    return f"the grader lost the process running your function ({status})"


def _judge_check(
    check: notebook.Check,
    declared,
    heard: _Heard,
    timeout: float,
    missing: dict[str, str] | None = None,
    fresh: int = 1,
) -> tuple[str, str]:
    """``(status, detail)`` of one check of a graded cell; ``missing``: the names of the exercise cells the notebook
    lacks (:attr:`notebook.Plan.missing`), whose exercises are not attempted; ``fresh``: how many cases no one has
    seen the answer must also get right (:func:`~ttr_edu.checks._rules.fresh_case`, drawn after the answers' process
    was forked; rebuilt here from their secret, and judged as the public cases are)."""
    import ast

    from ttr_edu.checks._core import CheckFailed
    from ttr_edu.checks._rules import (
        NotAttempted,
        Staged,
        fresh_case,
        has_fresh,
        judge_case,
        judge_ops,
        judge_source,
        judge_work,
        rule_case,
    )

    name = check.check.removeprefix("check_")
    if check.check in heard.missing:
        try:
            used = [n.id for n in ast.walk(ast.parse(check.expression)) if isinstance(n, ast.Name)]
        except SyntaxError:
            used = []
        lacking = sorted({(missing or {})[n] for n in used if n in (missing or {})})
        if lacking:
            return "not attempted", (
                f"{name}: the exercise cell {', '.join(map(repr, lacking))} is not in your notebook (deleted, or its "
                "nbgrader metadata removed), so nothing of it was run"
            )
        return "FAIL", f"{name}: {check.expression} is not defined ({heard.missing[check.check]})" + _cells(heard)
    if isinstance(declared, Staged):
        return _judge_staged(name, check, declared, heard, timeout)
    if declared is not None and check.arguments != 1:
        return "FAIL", (
            f"{name}: the graded cell calls this check with {check.arguments} arguments; a check declared for the "
            "engine takes the answer alone (the course's graded cell is wrong: tell your instructor)"
        )
    if declared is None:
        if check.check not in heard.legacy:
            return "FAIL", f"{name}: {_why_missing(heard, timeout, 0)}"
        status, message = heard.legacy[check.check]
        return (status if status in ("PASS", "FAIL", "not attempted") else "FAIL"), message
    notes, found = [], []
    try:
        public = list(declared.cases())
        for index, case in enumerate(public):
            outcome = heard.outcomes.get((check.check, index))
            if outcome is None:
                return "FAIL", f"{name}: {_why_missing(heard, timeout, index)}"
            if declared.rules.inputs_unchanged:  # what the grader read back overrides what the answer's process said
                changed = heard.changed.get((check.check, index))
                if changed is None:
                    return "FAIL", f"{name}: the grader could not read back your function's inputs on case {index}"
                outcome.inputs_after = {**(outcome.inputs_after or {}), **dict.fromkeys(changed)}
            notes.append(judge_case(declared, case, index, outcome))
            found.append(outcome.source)
        if fresh > 0 and has_fresh(declared):
            calls = heard.fresh.get(check.check, [])
            if len(calls) < fresh:
                return "FAIL", f"{name}: {_why_missing(heard, timeout, -1)}"
            for outcome, secret in calls[:fresh]:
                where, case = fresh_case(declared, secret, public)
                try:
                    judge_case(declared, case, where, outcome)
                except CheckFailed as failure:
                    raise CheckFailed(
                        f"{failure}\n  (this case was drawn afresh for grading, from the check's own case generator "
                        "with new random inputs: your function passes the check's public cases but not this one)"
                    ) from None
                found.append(outcome.source)
        counted = declared.rules.op_count
        if counted is not None:
            ops = {}
            for size in counted.sizes:
                heard_ops = heard.ops.get((check.check, size))
                if heard_ops is None:
                    return "FAIL", f"{name}: {_why_missing(heard, timeout, -1)}"
                outcome, secret = heard_ops
                judge_case(declared, rule_case(counted, size, secret), -1, outcome)
                if not isinstance(outcome.ops, int):
                    return "FAIL", f"{name}: the grader could not count your function's torch operations"
                ops[size] = outcome.ops
            judge_ops(declared, ops)
        for rule_index, rule in enumerate(declared.rules.work):
            work, cat = {}, {}
            for size in rule.sizes:
                heard_work = heard.work.get((check.check, rule_index, size))
                if heard_work is None:
                    return "FAIL", f"{name}: {_why_missing(heard, timeout, -1)}"
                outcome, secret = heard_work
                judge_case(declared, rule_case(rule, size, secret), -1, outcome)
                if not isinstance(outcome.work, int) or isinstance(outcome.work, bool) or outcome.work < 0:
                    return "FAIL", f"{name}: the grader could not count the work of your function's torch operations"
                work[size] = outcome.work
                # the answer's process reports it; it only words a refusal's message (judge_work), never the verdict
                ok = isinstance(outcome.cat_work, int) and not isinstance(outcome.cat_work, bool)
                cat[size] = min(max(outcome.cat_work, 0), outcome.work) if ok else 0
            judge_work(declared, rule, work, cat)
        judge_source(declared, found)
    except NotAttempted:
        return "not attempted", ""
    except CheckFailed as failure:
        return "FAIL", str(failure) + (_cells(heard) if "raised NameError" in str(failure) else "")
    note = next((n for n in notes if n), "")
    return "PASS", note


def _judge_staged(name: str, check: notebook.Check, declared, heard: _Heard, timeout: float) -> tuple[str, str]:
    """``(status, detail)`` of a :class:`~ttr_edu.checks._rules.Staged` check: its judge, run here on the plain record
    the answer's process sent (its data rebuilt and validated, the cases and references the grader's own)."""
    from ttr_edu.checks._core import CheckFailed
    from ttr_edu.checks._rules import NotAttempted

    record = heard.staged.get(check.check)
    if record is None:
        return "FAIL", f"{name}: {_why_missing(heard, timeout, 0)}"
    if isinstance(record, str):
        return "FAIL", f"{name}: the grader could not read what your answers gave ({record})"
    try:
        declared.judge(record, lambda line: None)
    except NotAttempted:
        return "not attempted", ""
    except CheckFailed as failure:
        return "FAIL", str(failure) + (_cells(heard) if "raised NameError" in str(failure) else "")
    except Exception as err:  # a record of the wrong shape: the answer's process sent what no check sends
        return "FAIL", f"{name}: the grader could not read back what your answers gave ({type(err).__name__})"
    return "PASS", ""


def _cells(heard: _Heard) -> str:
    return "".join(f"\n  ({name} raised {error})" for name, error in heard.cell_errors.items())


def grade(
    student: nbformat.NotebookNode,
    release: nbformat.NotebookNode,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    memory_gb: float = DEFAULT_MEMORY_GB,
    cells_timeout: float = DEFAULT_CELLS_TIMEOUT,
    hide: list[Path] | tuple[Path, ...] = (),
    require_sandbox: bool = False,
    fresh_cases: int = 1,
) -> Report:
    """Grade ``student`` against ``release`` (the release, or nbgrader's source with hidden tests).

    Args:
        timeout: seconds the answers of one graded cell may run, all cases together (its hidden tests included; the
            student's cells above it are not counted).
        cells_timeout: seconds the student's cells (exercise cells and cells of their own) may run in all, over the
            whole notebook: each graded cell's process runs every cell above it again, and each run is counted.
            A graded cell whose cells run past what is left gets that cell named, and its answers score 0; each
            graded cell's cells get at least ``timeout`` seconds.
        memory_gb: memory the answers of one graded cell may add to what the setup cells hold.
        hide: folders the answers may not see (the course folder); the grader's home is hidden as well.
        require_sandbox: refuse to grade where bubblewrap cannot start (for an exam), instead of falling back to the
            process group and the audit hook.
        fresh_cases: cases no one has seen, per check, that each answer must also get right: drawn from the check's
            own case generator with a secret drawn after the answers' process was forked (grading.md §4); 0 turns
            them off (for a measurement only: a table of the public cases' answers then scores).

    Raises:
        SandboxUnavailable: ``require_sandbox`` and no bubblewrap sandbox here (nothing was run).
        ValueError: ``fresh_cases`` not an integer in [0, 64], or ``cells_timeout`` not a finite number >= 0.
    """
    if isinstance(fresh_cases, bool) or not isinstance(fresh_cases, int) or not 0 <= fresh_cases <= 64:
        raise ValueError(f"grade: fresh_cases expects an integer in [0, 64], got {fresh_cases!r}")
    if isinstance(cells_timeout, bool) or not isinstance(cells_timeout, (int, float)) or not 0 <= cells_timeout < 1e6:
        raise ValueError(f"grade: cells_timeout expects a number of seconds in [0, 1e6), got {cells_timeout!r}")
    if require_sandbox and sandbox._bwrap() is None:
        raise SandboxUnavailable(
            "ttr-edu grader: require_sandbox is set and bubblewrap cannot start here, so nothing is graded "
            "(install bubblewrap, allow user namespaces, or unset require_sandbox)"
        )
    import importlib

    started = time.monotonic()
    plan = notebook.plan(student, release)
    declared: dict[str, Any] = {}
    for unit in plan.units:
        for check in unit.checks:
            module = importlib.import_module(f"ttr_edu.checks.{check.module}")
            declared[check.check] = getattr(getattr(module, check.check, None), "__exercise__", None)
    scratch = Path(tempfile.mkdtemp(prefix="ttr-edu-grade-")).resolve()
    job = {
        "setup": plan.setup,
        "cells": plan.cells,
        "units": [
            {"grade_id": u.grade_id, "checks": [vars(c) for c in u.checks], "hidden": u.hidden, "upto": u.upto}
            for u in plan.units
        ],
        "timeout": timeout,
        "cells_timeout": float(cells_timeout),
        "fresh": fresh_cases,
        "memory_bytes": int(memory_gb * (1 << 30)),
        "scratch": str(scratch),
    }
    import ttr_edu

    root = str(Path(ttr_edu.__file__).resolve().parents[1])
    argv, sandboxed = sandbox.command([sys.executable, "-I", "-c", _BOOT.format(root=root)], scratch, list(hide))
    # emptied after every graded cell: the sandbox's own /tmp and /dev/shm (outside it, those are the machine's)
    job["private"] = ["/tmp", "/dev/shm"] if sandboxed else []
    heard: dict[int, _Heard] = {}
    problem = None
    logs = Path(tempfile.mkdtemp(prefix="ttr-edu-log-"))  # out of the scratch folder, which is emptied between cells
    log = logs / "grader.log"
    try:
        with open(log, "wb") as errors:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
                env=sandbox.environment(scratch),
                cwd=scratch,
                start_new_session=True,
            )
            try:
                process.stdin.write(json.dumps(job).encode())
                process.stdin.close()
                # each graded cell: its cells (at least `timeout`, more from the notebook's budget), then its answers
                deadline = time.monotonic() + STARTUP_TIMEOUT + len(plan.units) * (2 * timeout + 15) + cells_timeout
                checks = [{c.check for c in u.checks} for u in plan.units]
                heard, problem = _listen(process, checks, deadline)
            except (BrokenPipeError, ValueError) as err:
                problem = f"the grading process could not be started ({type(err).__name__}: {err})"
            finally:
                _end(process)
        if problem is not None:
            tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
            if tail and "setup cells" not in problem:
                problem += " [" + " | ".join(tail) + "]"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(logs, ignore_errors=True)
    return _report(plan, declared, heard, problem, timeout, time.monotonic() - started, fresh_cases)


def _end(process: subprocess.Popen) -> None:
    """End the answers' process and everything it started (its process group; the sandbox's PID namespace)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
    if process.stdout is not None:
        process.stdout.close()


def _report(plan, declared, heard, problem, timeout, seconds, fresh=1) -> Report:
    verdicts, problems = [], list(plan.problems)
    if problem is not None:
        problems.append(problem)
    older = sorted({c.check for u in plan.units for c in u.checks if declared[c.check] is None})
    if older:
        problems.append(
            f"{len(older)} check{'s' if len(older) > 1 else ''} of this notebook ({', '.join(older)}) "
            f"{'are' if len(older) > 1 else 'is'} not declared for the engine yet: judged inside the answers' process, "
            "where a determined student could forge the verdict"
        )
    for index, unit in enumerate(plan.units):
        told = heard.get(index, _Heard())
        if problem is not None and told.status is None:
            told.harness = told.harness or problem
        results = [_judge_check(c, declared[c.check], told, timeout, plan.missing, fresh) for c in unit.checks]
        if not unit.checks and not unit.hidden:
            results = [("FAIL", "this graded cell calls no check the grader knows")]
        if told.garbled is not None:
            results.insert(
                0, ("FAIL", f"the grader refused a report of the process running your code ({told.garbled})")
            )
        if unit.hidden and all(status == "PASS" for status, _ in results):
            if not told.hidden_ran:
                results.append(("FAIL", f"hidden tests: {_why_missing(told, timeout, 0)}"))
            elif told.hidden is not None:
                results.append(("FAIL", f"hidden tests: {told.hidden}"))
        failed = [r for r in results if r[0] == "FAIL"]
        status, detail = failed[0] if failed else next((r for r in results if r[0] != "PASS"), ("PASS", ""))
        if status == "PASS":
            detail = "; ".join(d for s, d in results if d)
        verdicts.append(Verdict(unit.grade_id, unit.heading, unit.points, status, detail))
        if told.status is not None and told.status not in ("exit 0", f"exit {RULE_EXIT}"):
            problems.append(f"{unit.heading} ({unit.grade_id}): {_why_missing(told, timeout, 0)}")
    return Report(verdicts, problems, sandbox.protection(), seconds)
