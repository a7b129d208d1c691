"""``ttr-edu check``: run a student's notebook the way nbgrader's autograder does, and say how each exercise fares.

What runs is the student's notebook with the **release's** check cells: every graded cell is put back as the course
ships it (an edited one is replaced, a deleted one is added again after the exercise it belongs to), as nbgrader's
``OverwriteCells`` does. The kernel runs with ``NBGRADER_EXECUTION=autograde``, so a check raises on an unattempted
or wrong exercise, and each exercise's outcome is read from its graded cell: an error is a failure (0 points), no
error is a pass, as nbgrader scores it. Nothing the notebook prints can pass an exercise.

Before the first cell, the kernel imports ``ttr_edu`` from where this command runs it (never from a ``ttr_edu``
folder beside the notebook, which the kernel's working folder would otherwise put first), and checks it did.

The kernel's own output goes to a log, shown only when the check cannot start: a check prints what the notebook
prints, not the kernel's start-up warnings. A Ctrl-C stops the kernel and leaves nothing running: the notebook runs
in a worker thread, so the interrupt reaches the main thread alone, which kills the kernel's process group.
"""

from __future__ import annotations

import copy
import os
import re
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ttr_edu.course.notebooks import CHAPTER_NAME, CHECKS_IMPORT

if TYPE_CHECKING:
    import nbformat

__all__ = ["CheckRun", "Interrupted", "release_for", "restore_checks", "run_graded", "exercise_results"]

EXERCISE_HEADING = re.compile(r"^#+\s*(.*?)\s*[★☆]", re.MULTILINE)
SETUP_ID = "ttr-edu-check-setup"


class Interrupted(Exception):
    """Ctrl-C during the run; the kernel has been stopped."""


def _grading(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def _grade_id(cell) -> str | None:
    return _grading(cell).get("grade_id")


def _is_graded_check(cell) -> bool:
    meta = _grading(cell)
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def release_for(path: Path, nb: nbformat.NotebookNode, releases: list[Path]) -> Path | None:
    """The release notebook a student's notebook was copied from: the one sharing most of its exercise ids (nbgrader
    ``grade_id``, unique to a chapter), else the one with the same chapter slug in its file name; None if neither."""
    import nbformat

    ids = {_grade_id(c) for c in nb.cells} - {None}
    best, best_overlap = None, 0
    for release in releases:
        try:
            shipped = nbformat.read(release, as_version=4)
        except Exception:  # an unreadable release is not a match
            continue
        overlap = len(ids & {_grade_id(c) for c in shipped.cells if _grading(c).get("solution")})
        if overlap > best_overlap:
            best, best_overlap = release, overlap
    if best is not None:
        return best
    slug = re.match(r"^\d\d_([a-z0-9_]+?)(?:[.-].*)?\.ipynb$", path.name)
    for release in releases:
        match = CHAPTER_NAME.match(release.name)
        if slug and match and match[2] == slug[1]:
            return release
    return None


def restore_checks(student: nbformat.NotebookNode, release: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The student's notebook with the release's graded cells, as nbgrader's autograder restores them.

    A cell with a graded cell's ``grade_id`` becomes that cell again (source, type and metadata); a graded cell the
    student deleted is added back after the nearest cell before it in the release that the student still has (an
    exercise or another graded cell), or first if there is none.
    """
    nb = copy.deepcopy(student)
    shipped = {_grade_id(c): c for c in release.cells if _is_graded_check(c)}
    for i, cell in enumerate(nb.cells):
        grade_id = _grade_id(cell)
        if grade_id in shipped:
            nb.cells[i] = copy.deepcopy(shipped[grade_id])
    present = {_grade_id(c) for c in nb.cells} - {None}
    for index, cell in enumerate(release.cells):
        grade_id = _grade_id(cell)
        if grade_id not in shipped or grade_id in present:
            continue
        position = 0
        for earlier in reversed(release.cells[:index]):
            anchor = _grade_id(earlier)
            if anchor in present:
                position = next(i for i, c in enumerate(nb.cells) if _grade_id(c) == anchor) + 1
                break
        nb.cells.insert(position, copy.deepcopy(cell))
        present.add(grade_id)
    return nb


def _setup_cell(nb: nbformat.NotebookNode, package_init: Path):
    """A first cell that imports ttr_edu (and the chapter's checks) with the notebook's folder off ``sys.path``, then
    refuses to go on if it came from anywhere but ``package_init``."""
    import nbformat

    modules = sorted({m.group(1) for c in nb.cells if c.cell_type == "code" for m in CHECKS_IMPORT.finditer(c.source)})
    imports = "".join(f"    import ttr_edu.checks.{module}\n" for module in modules)
    source = (
        "import os as _os, sys as _sys\n"
        "_path = list(_sys.path)\n"
        "_sys.path[:] = [p for p in _sys.path if p not in ('', '.') and _os.path.abspath(p) != _os.getcwd()]\n"
        "try:\n"
        "    import ttr_edu.checks\n"
        f"{imports}"
        "finally:\n"
        "    _sys.path[:] = _path\n"
        f"if _os.path.realpath(ttr_edu.__file__) != {str(package_init)!r}:\n"
        "    raise ImportError(f'the kernel imports ttr_edu from {_os.path.dirname(ttr_edu.__file__)}, '\n"
        f"                      'not from {package_init.parent}, where ttr-edu check runs from')\n"
        "del _os, _sys, _path\n"
    )
    cell = nbformat.v4.new_code_cell(source)
    cell.id = SETUP_ID
    return cell


@dataclass
class CheckRun:
    """An executed notebook, and why it stopped early if it did."""

    nb: nbformat.NotebookNode
    stopped: str | None = None
    setup_error: str | None = None
    kernel_log: str = ""


def run_graded(nb: nbformat.NotebookNode, folder: Path, timeout: int, package_init: Path) -> CheckRun:
    """Execute ``nb`` (restored already) in ``folder`` as the autograder would, in a worker thread.

    The worker starts the kernel and runs the cells with nbclient's cell runner, on its own event loop: nbclient's
    whole-notebook runner would add SIGINT handlers and an exit hook of its own, which a Ctrl-C here must not meet.

    Raises:
        Interrupted: Ctrl-C; the kernel's process group is killed, and the worker finishes before this returns.
    """
    import asyncio

    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    nb = copy.deepcopy(nb)
    nb.cells.insert(0, _setup_cell(nb, package_init))
    scratch = Path(tempfile.mkdtemp(prefix="ttr-edu-check-"))
    log_path = scratch / "kernel.log"
    km = AsyncKernelManager(kernel_name="python3", connection_file=str(scratch / "kernel.json"))
    client = NotebookClient(nb, km=km, timeout=timeout, allow_errors=True, kernel_name="python3")
    env = {**os.environ, "NBGRADER_EXECUTION": "autograde"}  # what nbgrader's autograde sets for its kernel
    outcome: dict = {}

    async def execute(log) -> None:
        await km.start_kernel(cwd=str(folder), env=env, stdout=log, stderr=log)
        outcome["kernel"] = km
        try:
            client.kc = km.client()
            client.kc.start_channels()
            await client.kc.wait_for_ready(timeout=client.startup_timeout)
            client.kc.allow_stdin = False
            client.reset_execution_trackers()
            for index, cell in enumerate(nb.cells):
                await client.async_execute_cell(cell, index, execution_count=client.code_cells_executed + 1)
        finally:
            if client.kc is not None:
                client.kc.stop_channels()
            try:
                await km.shutdown_kernel(now=True)
            except Exception:  # already dead (Ctrl-C killed it): only its files are left
                pass
            await km._async_cleanup_resources()  # the connection file

    done = threading.Event()  # waited on, not Thread.join: a Ctrl-C inside join() marks a live thread as ended

    def work() -> None:
        try:
            with open(log_path, "wb") as log:
                asyncio.run(execute(log))
        except (CellTimeoutError, DeadKernelError, RuntimeError) as err:  # RuntimeError: the kernel died at start
            outcome["stopped"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}" if str(err) else ""
        except BaseException as err:  # reported by the main thread (or moot after Ctrl-C)
            outcome["error"] = err
        finally:
            done.set()

    worker = threading.Thread(target=work, name="ttr-edu-check", daemon=True)
    try:
        worker.start()
        while not done.wait(0.2):
            pass
    except KeyboardInterrupt:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        try:
            _stop(km, done)
        finally:
            signal.signal(signal.SIGINT, previous)
            _remove(scratch)
        raise Interrupted from None
    log = log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else ""
    _remove(scratch)
    if "error" in outcome:
        raise outcome["error"]
    setup = nb.cells.pop(0)
    error = next((o for o in setup.get("outputs", []) if o.get("output_type") == "error"), None)
    setup_error = f"{error.get('ename')}: {error.get('evalue')}" if error is not None else None
    if setup.get("execution_count") is None and setup_error is None:
        setup_error = "the kernel did not start" + (f" ({outcome['stopped']})" if outcome.get("stopped") else "")
    return CheckRun(nb, outcome.get("stopped"), setup_error, log)


def _stop(km, done: threading.Event) -> None:
    """Kill the kernel's process group (a kernel still starting, once it has a process) and wait for the worker."""
    deadline = time.monotonic() + 60
    killed = False
    while not done.is_set() and time.monotonic() < deadline:
        provisioner = getattr(km, "provisioner", None)
        group = getattr(provisioner, "pgid", None) or getattr(provisioner, "pid", None)
        if group is not None and not killed:
            try:
                if hasattr(os, "killpg"):
                    os.killpg(group, signal.SIGKILL)  # the kernel leads a session of its own (jupyter_client)
                else:  # pragma: no cover - Windows
                    os.kill(group, signal.SIGTERM)
            except OSError:
                pass
            killed = True
        done.wait(0.2)
    # a kernel that outlived this process would end by itself: it polls its parent (JPY_PARENT_PID) and exits with it


def _remove(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def exercise_results(executed: nbformat.NotebookNode, release: nbformat.NotebookNode) -> list[tuple[str, str, str]]:
    """``(exercise, outcome, detail)`` for each graded cell of the release, in the release's order.

    The outcome is ``PASS`` (the graded cell ran without an error), ``FAIL`` (detail: the first line of the error),
    ``not attempted`` (the check said the stub is untouched) or ``not run`` (the notebook stopped before it).
    """
    ran = {}
    for cell in executed.cells:
        grade_id = _grade_id(cell)
        if grade_id is not None and cell.cell_type == "code":
            ran.setdefault(grade_id, cell)
    results, heading = [], None
    for cell in release.cells:
        if cell.cell_type == "markdown":
            match = EXERCISE_HEADING.search(cell.source)
            heading = match.group(1) if match else heading
            continue
        if not _is_graded_check(cell):
            continue
        grade_id = _grade_id(cell)
        name = heading or grade_id.removeprefix("test_")
        done = ran.get(grade_id)
        error = next((o for o in (done or {}).get("outputs", []) if o.get("output_type") == "error"), None)
        if done is None or (done.get("execution_count") is None and error is None):
            results.append((name, "not run", "the notebook stopped before this check"))
        elif error is not None:
            reason = (str(error.get("evalue", "")).strip().splitlines() or [""])[0]
            kind = error.get("ename", "error")
            if kind == "CheckFailed" and re.search(r"^[\w .()\[\]-]+: not attempted \(", reason):
                results.append((name, "not attempted", ""))
            else:
                results.append((name, "FAIL", reason if kind == "CheckFailed" else f"{kind}: {reason}"))
        else:
            results.append((name, "PASS", ""))
    return results
