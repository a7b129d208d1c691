"""Where the runner's cells run (local worker processes or a Dask cluster), and how a Ctrl-C stops them.

A terminal's Ctrl-C sends SIGINT to every process of the foreground process group. So the command line
(``python -m ttr_edu.experiments``) runs the experiment in a child process in a session of its own
(:func:`run_in_own_session`), with every worker process it starts: the terminal's Ctrl-C reaches only the command
line, which passes the first one on to the experiment alone. The experiment stops the run: it writes its last line,
shuts the workers down with interrupts held back (:func:`interrupts_held`), and prints one line. Worker processes
also ignore SIGINT from their first task on (a joblib initializer, a Dask worker plugin), for a runner called from
Python in a terminal.

On Dask the runner keeps a *look-ahead queue*: twice as many cells in flight as the cluster has worker threads.
The scheduler holds the extra cells in its own queue (``worker-saturation: 1.0``, set here for a cluster started
here and in ``docs/cluster.md`` for one started elsewhere), so a worker that dies takes only the cell it was running,
and an adaptive cluster (``cluster.adapt``) sees queued work and starts more workers.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = [
    "SchedulerError",
    "check_scheduler",
    "interrupts_held",
    "run_in_own_session",
    "in_own_session",
    "ready_for_ctrl_c",
    "say_interrupted",
    "stop_once",
    "local_cells",
    "DaskCells",
    "LOOK_AHEAD",
    "probe",
    "preflight",
]

#: cells in flight per worker thread on Dask: one running, one waiting in the scheduler's queue
LOOK_AHEAD = 2

_ADDRESS = re.compile(r"(?P<scheme>tcp|tls|ucx)://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})")


class SchedulerError(ValueError):
    """A ``scheduler`` that cannot be used: a malformed address, or a Dask scheduler that does not answer."""


def check_scheduler(scheduler: str) -> int | tuple[str, int] | None:
    """Parse ``scheduler``: ``"local:N"`` gives ``N``; ``"tcp://HOST:PORT"`` (or ``tls``, ``ucx``) gives
    ``(HOST, PORT)``.

    Raises:
        SchedulerError: anything else (the message says what is expected and what was given).
    """
    if not isinstance(scheduler, str):
        raise SchedulerError(f"scheduler: expected a str such as local:2 or tcp://host:8786, got {scheduler!r}")
    if scheduler.startswith("local:"):
        count = scheduler.removeprefix("local:")
        if count.isdigit() and int(count) >= 1:
            return int(count)
        raise SchedulerError(f"scheduler: local:N needs a whole number N >= 1 of worker processes, got {scheduler!r}")
    match = _ADDRESS.fullmatch(scheduler)
    if match is None or not 1 <= int(match["port"]) <= 65535:
        raise SchedulerError(
            f"scheduler: expected local:N or a Dask address tcp://HOST:PORT (a port from 1 to 65535), got {scheduler!r}"
        )
    return match["host"].strip("[]"), int(match["port"])


#: seconds to connect to a Dask address, and then for the scheduler's greeting
PROBE_TIMEOUT = 5.0
#: the largest greeting a Dask scheduler sends (a few hundred bytes in practice)
_GREETING_LIMIT = 1 << 16


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("it closed the connection")
        data += chunk
    return data


def _dask_greeting(sock: socket.socket) -> str | None:
    """Read what a Dask scheduler sends first on a ``tcp://`` connection, without answering: its handshake message,
    framed as Dask's TCP comm frames every message (``distributed.comm.tcp``): an 8-byte length ``n``, then ``n``
    bytes that start with the frame count and each frame's length (8 bytes each), the first frame a msgpack map
    holding ``pickle-protocol``. Returns ``None`` for such a greeting, otherwise what was wrong (the reason shown).

    Raises:
        OSError: the connection failed or timed out while reading.
    """
    (total,) = struct.unpack("=Q", _read_exactly(sock, 8))
    if not 16 <= total <= _GREETING_LIMIT:
        return "it answers, but not as a Dask scheduler does"
    body = _read_exactly(sock, total)
    (frames,) = struct.unpack_from("=Q", body)
    if not 1 <= frames <= 64 or 8 * (frames + 1) > total:
        return "it answers, but not as a Dask scheduler does"
    lengths = struct.unpack_from(f"={frames}Q", body, 8)
    first = body[8 * (frames + 1) : 8 * (frames + 1) + lengths[0]]
    if sum(lengths) > total - 8 * (frames + 1) or b"pickle-protocol" not in first:
        return "it answers, but not as a Dask scheduler does"
    return None


def probe(scheduler: str, timeout: float = PROBE_TIMEOUT) -> None:
    """Check that a Dask scheduler answers at the address ``scheduler``, within ``timeout`` seconds for the
    connection and as many for its greeting: a refused or unresolvable address fails at once, a silent one after
    ``timeout``. On ``tcp://`` a scheduler greets first (its handshake), so anything else listening there is told
    apart without sending it a byte: a server with a banner of its own (Dask's client read its first 8 bytes as a
    length and asked for exabytes), or one that waits for a request, such as an HTTP server (the dashboard's port
    8787 for the scheduler's 8786: Dask's client waited without end). ``tls://`` and ``ucx://`` are only connected
    to (their handshake needs their own libraries).

    Raises:
        SchedulerError: a malformed address, or no Dask scheduler answering there (the reason in brackets).
    """
    parsed = check_scheduler(scheduler)
    if isinstance(parsed, int):
        return
    try:
        with socket.create_connection(parsed, timeout=timeout) as sock:
            wrong = _dask_greeting(sock) if scheduler.startswith("tcp://") else None
    except TimeoutError:
        wrong = f"it accepts connections but says nothing a Dask scheduler says within {timeout:g} s"
    except struct.error:
        wrong = "it answers, but not as a Dask scheduler does"
    except OSError as error:
        wrong = error.strerror or str(error) or type(error).__name__
    if wrong is not None:
        raise SchedulerError(f"scheduler: no Dask scheduler answers at {scheduler} ({wrong})") from None


def preflight(prog: str, argv: list[str]) -> tuple[str, int] | None:
    """What the command line can refuse before it starts the experiment (and imports torch, which takes seconds
    on a busy machine): a ``--scheduler`` that is malformed (exit status 2) or does not answer (1). Returns the
    one-line message and the status, or ``None``; the experiment checks its arguments again, in full."""
    values = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--scheduler"]
    values += [a.split("=", 1)[1] for a in argv if a.startswith("--scheduler=")]
    for value in values:
        try:
            check_scheduler(value)
        except SchedulerError as error:
            return f"{prog}: error: --{error}", 2
        try:
            probe(value)
        except SchedulerError as error:
            return f"error: --{error}", 1
    return None


def stop_once(signum, frame):
    """A SIGINT handler: the first Ctrl-C raises ``KeyboardInterrupt``; later ones are ignored, so that nothing
    interrupts the shutdown that follows (closing the CSV, stopping the workers) or its one-line message."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _ignore_sigint() -> None:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _no_process_lock_for_tqdm() -> None:
    """Give tqdm a thread lock in this worker process, so that its first bar (every cell trains through
    :func:`ttr_edu.train.train`, which makes one, hidden in a worker) does not make a multiprocessing lock.

    That lock is a named POSIX semaphore (a worker process is not forked, so the name is kept), registered with a
    resource tracker and unlinked only when the worker exits in order. A Ctrl-C kills the workers mid-cell, so the
    tracker reported it: "There appear to be N leaked semaphore objects" (two lines on stderr, one per worker).
    The lock only keeps bars of several processes from writing over each other on one terminal; a worker's bars
    are hidden, and its threads still share this one."""
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())


def _worker_setup() -> None:
    """Run in each local worker process before its first cell: SIGINT ignored, no multiprocessing lock for tqdm."""
    _ignore_sigint()
    _no_process_lock_for_tqdm()


#: in a process that :func:`run_in_own_session` started: the pipe on which it says it is ready for a Ctrl-C
_READY_FD = "TTR_EDU_READY_FD"
#: whether :func:`run_in_own_session` started this process (read at import, before :func:`ready_for_ctrl_c` takes the
#: variable away): then that parent says "interrupted", once, and this process never does
_PARENT_SAYS_IT = _READY_FD in os.environ


def say_interrupted() -> None:
    """The one line of a Ctrl-C (:data:`ttr_edu.experiments.INTERRUPTED`) on stderr, unless the process that started
    this one says it (:func:`run_in_own_session`, for an exit status of 130 or an end by SIGINT): then no later
    ``KeyboardInterrupt`` here, nor a copy of this process, can print it a second time (CI saw it twice)."""
    if not _PARENT_SAYS_IT:
        from ttr_edu.experiments import INTERRUPTED

        print(INTERRUPTED, file=sys.stderr)


def in_own_session() -> bool:
    """Whether this process was started by :func:`run_in_own_session` (or cannot be: not on POSIX)."""
    return os.name != "posix" or _READY_FD in os.environ


def ready_for_ctrl_c() -> None:
    """Tell :func:`run_in_own_session` that this process now handles a Ctrl-C as it should (its ``try`` around
    ``KeyboardInterrupt`` stands); until then a Ctrl-C waits there. From now on, should the process that started
    this one die without passing a Ctrl-C on (killed, ``SIGKILL``), this process stops as on a Ctrl-C, instead of
    running on unseen in its own session. Does nothing in a process :func:`run_in_own_session` did not start."""
    fds = os.environ.pop(_READY_FD, None)
    if fds is None:
        return
    ready, alive = (int(fd) for fd in fds.split(","))
    try:
        os.write(ready, b"1")
        os.close(ready)
    except OSError:
        pass

    def watch():
        with os.fdopen(alive, "rb") as parent:
            parent.read()  # the parent never writes: this returns when its end closes, that is when it is gone
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=watch, name="parent-alive", daemon=True).start()


def run_in_own_session(command: list[str]) -> int:
    """Run ``command`` in a child process in a new session, pass it the first Ctrl-C, return its exit status
    (``128 + N`` for a child ended by signal ``N``).

    A terminal's Ctrl-C signals its whole foreground process group: this process, but not the child's session,
    which holds the child and every worker process it starts. So the workers never see a Ctrl-C (none prints a
    traceback), and the child alone decides how to stop. The Ctrl-C is passed on once the child says it can take
    it (:func:`ready_for_ctrl_c`: a Python that is still starting would print a traceback); later ones are not
    passed on, so nothing interrupts the child's shutdown. A hang-up (a closed terminal) or a termination of this
    process is passed on as a Ctrl-C too, so the child closes its files the same way. A child that a Ctrl-C ended
    before it could handle one (the terminal's SIGINT reached it while it was being started, still in the terminal's
    process group) printed nothing. This process prints the one line for both (an exit status of 130 or an end by
    SIGINT); the child never prints it (:func:`say_interrupted`).
    """
    state = {"child": None, "ready": False, "asked": False, "sent": False}

    def pass_on_once():
        if state["asked"] and state["ready"] and not state["sent"]:
            state["sent"] = True
            state["child"].send_signal(signal.SIGINT)

    def on_signal(signum, frame):
        state["asked"] = True
        pass_on_once()

    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, on_signal)
    ready_read, ready_write = os.pipe()  # the child writes a byte once it can take a Ctrl-C
    alive_read, alive_write = os.pipe()  # this end stays open while this process lives
    try:
        state["child"] = subprocess.Popen(
            command,
            env={**os.environ, _READY_FD: f"{ready_write},{alive_read}"},
            pass_fds=(ready_write, alive_read),
            start_new_session=True,
        )
    finally:
        os.close(ready_write)
        os.close(alive_read)
    try:
        with os.fdopen(ready_read, "rb") as ready:
            ready.read(1)  # b"1" when the child is ready, b"" when it ended first (a signal meanwhile is noted)
        state["ready"] = True
        pass_on_once()
        status = state["child"].wait()
    finally:
        os.close(alive_write)
    if status in (130, -signal.SIGINT):  # stopped by a Ctrl-C (or ended by one while it was starting): said here
        from ttr_edu.experiments import INTERRUPTED

        print(INTERRUPTED, file=sys.stderr)
    return 128 - status if status < 0 else status


@contextmanager
def interrupts_held():
    """A Ctrl-C inside this block (a shutdown, a cluster starting) is held back and raised when the block ends.

    SIGINT's Python handler is swapped for one that only notes the signal (Python runs signal handlers in the main
    thread; a system call the signal interrupts is resumed), and a noted one is raised by calling the original
    handler at the end. Outside the main thread, or when SIGINT has no Python handler, this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler):
        yield
        return
    held: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, handler)
        if held:
            handler(signal.SIGINT, None)


def _paired(cell_fn, cell):
    return cell, cell_fn(cell)


#: the warnings filter (``-W`` syntax) that silences loky's resource tracker at its shutdown: each of its messages
#: starts ``resource_tracker:`` (joblib 1.5, ``loky/backend/resource_tracker.py``)
TRACKER_QUIET = "ignore:resource_tracker:UserWarning"


@contextmanager
def _tracker_started_quiet() -> Iterator[None]:
    """Within this block, processes started from here (loky's resource tracker, launched with the first semaphore of
    a new pool, and its workers) ignore warnings that start ``resource_tracker:``.

    The tracker is a process of its own that writes to this process's stderr. When every process that registered a
    named semaphore with it has gone, it unlinks those that were not unregistered and warns, in five lines, "There
    appear to be N leaked semlock objects to clean up at shutdown". After a Ctrl-C kills the workers mid-start, one
    semaphore of the pool was now and then left registered (seen once in a loaded run of the test suite), so the student
    read five lines after the one that says the run stopped. The tracker still unlinks it, so nothing leaks on the
    machine; only its report is dropped, and with it the tracker's other message at shutdown (a name it failed to
    unlink), which starts the same way. The filter reaches only processes started inside the block: a warning raised in
    this process (loky's "resource_tracker: process died unexpectedly, relaunching") is still shown."""
    before = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = f"{before},{TRACKER_QUIET}" if before else TRACKER_QUIET
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONWARNINGS", None)
        else:
            os.environ["PYTHONWARNINGS"] = before


def local_cells(cell_fn: Callable, todo: list[dict], jobs: int) -> Iterator[tuple[dict, dict]]:
    """``(cell, row)`` pairs as cells finish, from ``jobs`` local worker processes (loky's reusable executor, which
    joblib uses too: its workers are reused across calls). The workers ignore SIGINT.

    A Ctrl-C (``KeyboardInterrupt``) can land in this process's main thread at any bytecode. Inside loky's own code
    (its workers starting, a task submitted, the pool shut down) it left half-started workers printing tracebacks,
    "cannot join thread" errors, or semaphores and folders that loky's ``resource_tracker`` then reported as leaked.
    So loky's code runs with interrupts held (:func:`interrupts_held`); the Ctrl-C lands only while this generator
    waits for a result (a queue fed by the futures' callbacks, in loky's thread) or in the caller's code between
    results. Either way, once the generator ends early (an exception here, or ``close()`` by the caller), the
    workers are killed and the pool shut down, its resources released, before the Ctrl-C goes on. No more cells
    than workers are in flight, so none waits in loky's own queues when the pool is shut down."""
    import queue
    import time

    from joblib.externals.loky import get_reusable_executor

    finished: queue.SimpleQueue = queue.SimpleQueue()
    waiting, running, executor, complete = list(todo), 0, None, False
    workers = min(jobs, len(todo))

    def submit_more():
        nonlocal running
        while waiting and running < workers:  # no more cells in flight than workers: none waits in loky's queues
            executor.submit(_paired, cell_fn, waiting.pop(0)).add_done_callback(finished.put)
            running += 1

    try:
        with interrupts_held(), _tracker_started_quiet():  # a Ctrl-C meanwhile is raised once the pool stands
            executor = get_reusable_executor(max_workers=workers, initializer=_worker_setup)
            submit_more()
        while running:
            future = finished.get()  # a Ctrl-C lands here, or in the caller's code
            running -= 1
            with interrupts_held():
                submit_more()
            yield future.result()  # raises what the cell raised, or loky's error for a worker that died
        complete = True
    finally:
        if not complete and executor is not None:
            with interrupts_held():
                # loky's shutdown with kill_workers empties its table of pending cells, then takes the cells its
                # manager thread has not yet moved to the workers' queue from that table (a KeyError in that
                # thread, printed): let the thread move the cells just submitted first (the workers' queue has
                # room for them all, as no more cells than workers are in flight)
                ids = getattr(executor, "_work_ids", None)
                deadline = time.monotonic() + 10
                while ids is not None and not ids.empty() and time.monotonic() < deadline:
                    time.sleep(0.01)
                executor.shutdown(wait=True, kill_workers=True)


def _ignore_sigint_plugin():
    """A Dask worker plugin: each worker process ignores SIGINT and gives tqdm a thread lock
    (:func:`_no_process_lock_for_tqdm`; one its nanny restarts later too)."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class IgnoreSigint(WorkerPlugin):
        idempotent = True
        name = "ttr-edu-ignore-sigint"

        def setup(self, worker):  # Dask calls it on each worker, restarted ones too
            _ignore_sigint()
            _no_process_lock_for_tqdm()

    return IgnoreSigint()


class _NoCancelErrorOfAnInterruptedWait(logging.Filter):
    """Drops the one record Dask's client loop logs after a Ctrl-C that lands in ``distributed.utils.sync``: that
    function then schedules its ``cancel`` callback, which (Dask 2026.8) reads a ``future`` the waiting coroutine has
    not set yet when the Ctrl-C comes early, and Tornado logs the failure with its traceback ("Exception in callback
    ... sync.<locals>.cancel"). Under load the window widens: two loaded runs of the test suite printed it. The
    interrupt is the runner's, and reported by it in one line; every other record passes, that callback's other
    errors included (only the ``NameError`` of the unset ``future`` is dropped)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[0] if record.exc_info else None
        unset = error is not None and issubclass(error, NameError)
        return not (unset and "sync.<locals>.cancel" in record.getMessage())


def quiet_the_cancel_of_an_interrupted_wait() -> None:
    """Puts :class:`_NoCancelErrorOfAnInterruptedWait` on Tornado's application logger (where the Dask client's event
    loop reports a callback's error), once."""
    log = logging.getLogger("tornado.application")
    if not any(isinstance(f, _NoCancelErrorOfAnInterruptedWait) for f in log.filters):
        log.addFilter(_NoCancelErrorOfAnInterruptedWait())


def _platform_of_worker() -> str:
    from ttr_edu.experiments.provenance import platform_lines

    return json.dumps(platform_lines(), sort_keys=True)


class DaskCells:
    """A connection to a Dask cluster that runs cells: ``"local:N"`` starts a ``LocalCluster`` of ``N``
    single-thread worker processes here; ``"tcp://HOST:PORT"`` joins a running scheduler.

    Connecting comes first, before the runner touches its CSV: a malformed address or a scheduler that does not
    answer raises :class:`SchedulerError` in under ten seconds.

    Raises:
        SchedulerError: a malformed address, or no Dask scheduler answering at it.
    """

    def __init__(self, scheduler: str) -> None:
        parsed = check_scheduler(scheduler)
        self.address, self.cluster, self.client = scheduler, None, None
        if not isinstance(parsed, int):  # before Dask is imported (seconds)
            probe(scheduler)
        import dask
        from distributed import Client, LocalCluster

        quiet_the_cancel_of_an_interrupted_wait()
        if isinstance(parsed, int):
            for name in ("distributed", "distributed.scheduler", "distributed.nanny", "distributed.worker"):
                logging.getLogger(name).setLevel(logging.CRITICAL)  # a lost worker is reported once, by the runner
            environ = {
                **dask.config.get("distributed.nanny.pre-spawn-environ"),
                "DASK_LOGGING__DISTRIBUTED": "critical",
            }
            config = {
                "distributed.scheduler.worker-saturation": 1.0,  # extra cells wait in the scheduler, not on a worker
                "distributed.nanny.pre-spawn-environ": environ,  # the workers log nothing: the runner reports
            }
            try:
                with dask.config.set(config), interrupts_held():
                    self.cluster = LocalCluster(
                        n_workers=parsed,
                        threads_per_worker=1,
                        processes=True,
                        dashboard_address=":0",  # a free port: None still takes 8787, and warns when it is in use
                        silence_logs=logging.ERROR,
                    )
                    self.client = Client(self.cluster)
                    self.client.register_plugin(_ignore_sigint_plugin())
            except BaseException:  # a Ctrl-C held while the cluster started is raised once it stands: stop it again
                self.close()
                raise
            return
        try:
            self.client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError) as error:
            raise SchedulerError(
                f"scheduler: {scheduler} accepts connections but is not a Dask scheduler ({error})"
            ) from None

    def workers(self) -> str:
        """The workers connected now, grouped by platform (torch, BLAS, Python, CPU), for the CSV's header."""
        if self.cluster is not None:
            return f"{len(self.client.nthreads())} local worker processes (this machine)"
        found = Counter(self.client.run(_platform_of_worker).values())
        if not found:
            return "none connected at the start"
        return "; ".join(
            f"{count} × " + ", ".join(f"{k} {v}" for k, v in json.loads(kind).items()) for kind, count in found.items()
        )

    def cells(self, cell_fn: Callable, todo: list[dict], lost: list[dict]) -> Iterator[tuple[dict, dict]]:
        """``(cell, row)`` pairs as cells finish; a cell whose worker died goes to ``lost`` instead."""
        from distributed import wait
        from distributed.client import FutureCancelledError

        try:
            from distributed.scheduler import KilledWorker
        except ImportError:  # pragma: no cover - older distributed
            from distributed import KilledWorker

        waiting = list(todo)
        running: dict = {}
        try:
            while waiting or running:
                threads = sum(self.client.nthreads().values())  # workers join (and leave) while the grid runs
                while waiting and len(running) < max(LOOK_AHEAD * threads, LOOK_AHEAD):
                    cell = waiting.pop(0)
                    running[self.client.submit(_paired, cell_fn, cell, pure=False)] = cell
                try:
                    finished = wait(list(running), timeout=10, return_when="FIRST_COMPLETED").done
                except TimeoutError:
                    continue
                for future in finished:
                    cell = running.pop(future)
                    try:
                        yield future.result()
                    except (KilledWorker, FutureCancelledError):
                        lost.append(cell)
        finally:
            if running:
                with interrupts_held():
                    self.client.cancel(list(running))

    def close(self) -> None:
        """Close the client, and the cluster if it was started here (a Ctrl-C meanwhile waits until it is done)."""
        with interrupts_held():
            if getattr(self, "client", None) is not None:
                self.client.close()
            if self.cluster is not None:
                self.cluster.close()
