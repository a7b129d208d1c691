"""``python -m ttr_edu.experiments capacity|overwrite|mqar|mqar_memories|lm|design_space [options]``: run one
experiment's grid."""

from __future__ import annotations

import importlib
import signal
import sys
import threading

from ttr_edu.experiments import EXPERIMENTS
from ttr_edu.experiments.workers import (
    in_own_session,
    preflight,
    ready_for_ctrl_c,
    run_in_own_session,
    say_interrupted,
    stop_once,
)


def main(argv: list[str] | None = None) -> int:
    """Run one experiment here, in this process; returns the exit status (130 after a Ctrl-C).

    The first Ctrl-C stops the experiment, which says so in one line. Every later one is ignored to the end of the
    process: restored, Python's handler would raise a second ``KeyboardInterrupt`` (a second line) or, once Python
    has put the signal back at its default on exit, end the process by the signal, which the parent then reports as a
    Ctrl-C that nothing said (:func:`ttr_edu.experiments.workers.run_in_own_session`). Without a Ctrl-C, SIGINT's
    handler is put back as it was (this function is also called from Python)."""
    argv = sys.argv[1:] if argv is None else argv
    ours = threading.current_thread() is threading.main_thread()
    ours = ours and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    previous = signal.signal(signal.SIGINT, stop_once) if ours else None
    try:
        return _main(argv)
    except KeyboardInterrupt:  # before the experiment's own handler stands
        say_interrupted()
        return 130
    finally:
        if ours and signal.getsignal(signal.SIGINT) is stop_once:  # no Ctrl-C came
            signal.signal(signal.SIGINT, previous)


def command_line() -> int:
    """``python -m ttr_edu.experiments ...``: the experiment runs in a child process in a session of its own, so
    that a terminal's Ctrl-C reaches this process alone, which passes it on once
    (:func:`ttr_edu.experiments.workers.run_in_own_session`)."""
    argv = sys.argv[1:]
    if argv and argv[0] in EXPERIMENTS and not in_own_session():
        refused = preflight(f"python -m ttr_edu.experiments {argv[0]}", argv[1:])
        if refused is not None:  # said before the experiment imports torch, which takes seconds
            print(refused[0], file=sys.stderr)
            return refused[1]
        try:
            return run_in_own_session([sys.executable, "-m", "ttr_edu.experiments", *argv])
        except KeyboardInterrupt:  # before the child was started
            say_interrupted()
            return 130
    return main(argv)


def _main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        print("Each experiment takes --help for its options.")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in EXPERIMENTS:
        print(f"unknown experiment {name!r}; valid names are {', '.join(EXPERIMENTS)}", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(f"ttr_edu.experiments.{name}")  # lazily: mqar is written separately
    except ModuleNotFoundError as error:
        if error.name != f"ttr_edu.experiments.{name}":
            raise
        print(
            f"experiment {name!r} is not available in this installation (ttr_edu/experiments/{name}.py is missing)",
            file=sys.stderr,
        )
        return 1
    # Only now, with torch and the experiment imported, may the parent pass a Ctrl-C on: one that lands in an import
    # can be swallowed there (a library's bare ``except``) and the run would go on (a reviewer saw it once, at 1.5 s)
    ready_for_ctrl_c()
    status = module.main(rest)
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(command_line())
