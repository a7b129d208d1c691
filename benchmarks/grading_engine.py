"""What grading costs: the grading engine per notebook, against the check cells a student runs in JupyterLab.

For chapters 01 and 04 this prints, side by side in one run (so both share whatever load the machine has):

* the engine's wall time per notebook (:func:`ttr_edu.checks.grading.engine.grade`: the sandbox, the setup cells, one
  locked-down process per graded cell, the references and comparisons), for the solved notebook and the release
  (unsolved), the median of ``--repeats`` runs, and the CPU time of the grader's own process;
* each check cell in the student's kernel (the check function on the chapter's solution, in this process): the
  slowest of them, which must stay well under 2 s;
* how the answers' process was contained (bubblewrap or a process group).

    PYTHONPATH=. python benchmarks/grading_engine.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import statistics
import time
from pathlib import Path

import nbformat

from ttr_edu.checks.grading import engine, notebook, sandbox

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ["01_hebbian_memory", "04_delta_rule"]


def _engine_seconds(student, release, repeats: int) -> tuple[float, float, float]:
    """Median wall seconds, median CPU seconds of this process, and the points of ``student`` graded by the engine."""
    walls, cpus, score = [], [], 0.0
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        report = engine.grade(student, release)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        score = report.score
    return statistics.median(walls), statistics.median(cpus), score


def _check_cells(solved, release) -> list[tuple[str, float]]:
    """Seconds of each check function on the solution, in this process (as a JupyterLab check cell runs it)."""
    plan = notebook.plan(solved, release)
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        for source in plan.setup + [code for _, code in plan.cells]:
            exec(compile(source, "<cell>", "exec"), namespace)  # the course's own solution
    timings = []
    for unit in plan.units:
        for check in unit.checks:
            function = getattr(importlib.import_module(f"ttr_edu.checks.{check.module}"), check.check)
            answer = eval(check.expression, namespace)  # the release's own expression
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                function(answer)
            timings.append((check.check, time.perf_counter() - start))
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"answers contained by: {sandbox.protection()}")
    print(f"{'chapter':<22} {'notebook':<9} {'engine wall s':>13} {'grader CPU s':>12} {'points':>7}")
    for name in CHAPTERS:
        release = nbformat.read(ROOT / "chapters" / f"{name}.ipynb", as_version=4)
        solved = nbformat.read(ROOT / "solutions" / f"{name}.ipynb", as_version=4)
        for label, student in (("solved", solved), ("unsolved", release)):
            wall, cpu, score = _engine_seconds(student, release, args.repeats)
            print(f"{name:<22} {label:<9} {wall:>13.1f} {cpu:>12.1f} {score:>7g}")
        slowest = max(_check_cells(solved, release), key=lambda t: t[1])
        print(f"{'':<22} slowest check cell in the kernel: {slowest[0]} {slowest[1]:.2f} s")


if __name__ == "__main__":
    main()
