"""A toy experiment with a command line like the package's, for the tests that press Ctrl-C in it.

``python -m tests.experiments.toy_grid --flag FILE --free N [runner options]`` runs 6 cells; the first ``N`` return
at once, the others wait until ``FILE`` exists (at most two minutes). So a test decides, by a condition and not by
a clock, when the run has written its header, its first rows, or nothing yet. Like ``python -m ttr_edu.experiments``
it runs itself in a session of its own (:func:`ttr_edu.experiments.workers.run_in_own_session`).
"""

from __future__ import annotations

import os
import sys
import time
from functools import partial

from ttr_edu.experiments import runner, workers

EXPERIMENT = runner.Experiment(
    name="toy", fields=("x", "seconds"), key=("x",), types={"x": int, "seconds": float}, timing=("seconds",)
)


def cell(flag: str, free: int, c: dict) -> dict:
    """Cell ``x`` returns at once if ``x < free``, else once ``flag`` exists."""
    deadline = time.monotonic() + 120
    while c["x"] >= free and not os.path.exists(flag) and time.monotonic() < deadline:
        time.sleep(0.05)
    return {"x": c["x"], "seconds": 0.0}


@runner.guarded
def main(argv: list[str] | None = None) -> int:
    workers.ready_for_ctrl_c()
    parser = runner.ArgumentParser(prog="python -m tests.experiments.toy_grid")
    parser.add_argument("--flag", required=True)
    parser.add_argument("--free", type=int, default=0)
    runner.add_arguments(parser, "toy.csv")
    args = parser.parse_args(argv)
    options = runner.runner_options(parser, args)
    cells = [{"x": x} for x in range(6)]
    runner.run(EXPERIMENT, {"toy": 1}, cells, partial(cell, args.flag, args.free), **options)
    return 0


if __name__ == "__main__":
    if not workers.in_own_session():
        sys.exit(workers.run_in_own_session([sys.executable, "-m", "tests.experiments.toy_grid", *sys.argv[1:]]))
    sys.exit(main(sys.argv[1:]))
