"""A toy experiment with a command line like the package's, for the tests that press Ctrl-C in it.

``python -m tests.experiments.toy_grid --flag FILE --free N [runner options]`` runs 6 cells; the first ``N`` return
at once, the others wait until ``FILE`` exists (at most two minutes). So a test decides, by a condition and not by
a clock, when the run has written its header, its first rows, or nothing yet. Like ``python -m ttr_edu.experiments``
it runs itself in a session of its own (:func:`ttr_edu.experiments.workers.run_in_own_session`).

``--ctrl-c-at`` puts the Ctrl-C (a SIGINT the experiment sends itself) at an exact place, where a terminal's Ctrl-C
lands only now and then: ``worker-start`` inside loky's code that starts a worker process, ``row`` inside the
runner's code that reads a finished cell's row (between two results of the workers).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from functools import partial

from ttr_edu.experiments import runner, workers

EXPERIMENT = runner.Experiment(
    name="toy", fields=("x", "seconds"), key=("x",), types={"x": int, "seconds": float}, timing=("seconds",)
)


class CtrlCRow(dict):
    """A row that sends its process a SIGINT when the runner reads it (in the experiment's process)."""

    def __getitem__(self, key):
        os.kill(os.getpid(), signal.SIGINT)
        return super().__getitem__(key)


def cell(flag: str, free: int, ctrl_c_at: str | None, c: dict) -> dict:
    """Cell ``x`` returns at once if ``x < free``, else once ``flag`` exists. Like a real cell
    (:func:`ttr_edu.train.train`), it makes a (hidden) tqdm bar first: tqdm's first bar in a process makes a
    multiprocessing lock, a named semaphore that a worker killed mid-cell leaves for a resource tracker to report."""
    from tqdm.auto import tqdm

    tqdm(total=1, disable=True).close()
    deadline = time.monotonic() + 120
    while c["x"] >= free and not os.path.exists(flag) and time.monotonic() < deadline:
        time.sleep(0.05)
    return (CtrlCRow if ctrl_c_at == "row" else dict)(x=c["x"], seconds=0.0)


def ctrl_c_when_workers_start() -> None:
    """The first time loky starts a worker process, this process gets a SIGINT just after the worker's Python is
    started and before loky hands it its start-up data: the handler runs at the next bytecode, inside loky."""
    from joblib.externals.loky.backend import fork_exec as module

    spawn = module.fork_exec

    def interrupted_spawn(*args, **kwargs):
        module.fork_exec = spawn
        pid = spawn(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return pid

    module.fork_exec = interrupted_spawn


@runner.guarded
def main(argv: list[str] | None = None) -> int:
    workers.ready_for_ctrl_c()
    parser = runner.ArgumentParser(prog="python -m tests.experiments.toy_grid")
    parser.add_argument("--flag", required=True)
    parser.add_argument("--free", type=int, default=0)
    parser.add_argument("--ctrl-c-at", choices=("worker-start", "row"), default=None)
    runner.add_arguments(parser, "toy.csv")
    args = parser.parse_args(argv)
    options = runner.runner_options(parser, args)
    cells = [{"x": x} for x in range(6)]
    if args.ctrl_c_at == "worker-start":
        ctrl_c_when_workers_start()
    runner.run(EXPERIMENT, {"toy": 1}, cells, partial(cell, args.flag, args.free, args.ctrl_c_at), **options)
    return 0


if __name__ == "__main__":
    if not workers.in_own_session():
        sys.exit(workers.run_in_own_session([sys.executable, "-m", "tests.experiments.toy_grid", *sys.argv[1:]]))
    sys.exit(main(sys.argv[1:]))
