"""The one runner every experiment grid goes through: cells run here or on a Dask cluster, rows land in a CSV.

An experiment describes its CSV once (:class:`Experiment`: the columns, the columns that name a cell, how to parse
them) and hands :func:`run` three things: its *recipe* (a JSON-able dict of everything the cells share and the
results depend on), its *cells* (one dict per cell, keyed by the cell columns) and a picklable function that trains
one cell and returns its row. The runner then

* runs the cells one after another, in ``jobs`` local processes (joblib, one thread each), or on a Dask cluster
  (``scheduler="local:N"`` starts a ``LocalCluster`` of ``N`` single-thread worker processes here;
  ``scheduler="tcp://host:8786"`` joins a running scheduler, e.g. one started by ``dask-jobqueue`` on Slurm), keeping
  twice as many cells queued as there are worker threads so that an adaptive cluster grows (:mod:`.workers`);
* connects to the cluster before it opens the CSV, so an address that does not answer leaves an existing file as
  it was;
* appends each row to the CSV the moment it arrives, as one write, so an interrupted run keeps every finished cell;
* writes, above the rows, how to reproduce them (:mod:`.provenance`): the experiment, the package version, the
  command, the git commit of the checkout, the recipe, a digest of the training code (every module a cell trains
  through), the recipe hash that covers both, and torch, BLAS, Python and the CPU (every row carries the hash and the
  version too);
* on ``resume``, keeps the rows already in the CSV and trains only the missing cells, after checking that the file
  was written by this experiment with this recipe, this training code and this package version (a difference is
  named, and nothing is mixed). A last line cut short by a killed run is completed if it is a whole row, dropped
  otherwise, with a note.

A Dask worker that dies mid-cell (a killed process, a pre-empted node) loses only that cell: the others finish and
are written, and the run ends by naming the lost cells, which ``resume`` trains again. With joblib, a dying worker
process stops the pool; the rows written so far are kept, and ``resume`` trains the rest.

Dask is optional (``pip install 'ttr-edu[cluster]'``); nothing in the course needs it. ``docs/cluster.md`` runs the
Zoology-scale MQAR grid on Slurm and prices it.

The command line of every experiment (:func:`add_arguments`, :func:`runner_options`, :func:`command_line`,
:func:`guarded`) shares these rules: an argument error is one line and exit status 2; a scheduler that does not
answer, or an ``--out`` that cannot be written (a full disk), one line and exit status 1, the CSV untouched or
closed; Ctrl-C, whenever it comes, is one line and exit status 130 (the CSV stays valid); a lost cell is one line
and exit status 1.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import importlib.util
import io
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ttr_edu._internal.install import pip_install_extra
from ttr_edu._internal.progress import progress_enabled
from ttr_edu.experiments import workers
from ttr_edu.experiments.provenance import code_digest, git_commit, package_version, platform_lines, training_code
from ttr_edu.experiments.workers import SchedulerError

__all__ = [
    "Experiment",
    "RunResult",
    "ResumeRefused",
    "OutputError",
    "SchedulerError",
    "run",
    "read",
    "recipe_hash",
    "package_version",
    "git_commit",
    "ArgumentParser",
    "add_arguments",
    "runner_options",
    "command_line",
    "guarded",
    "report_lost",
    "RUNNER_FIELDS",
]

#: columns the runner adds to every row: the hash of the recipe and the package version that wrote it
RUNNER_FIELDS = ("recipe", "version")


def _bool(text: str) -> bool:
    if text not in ("True", "False"):
        raise ValueError(f"expected True or False, got {text!r}")
    return text == "True"


@dataclass(frozen=True)
class Experiment:
    """How one experiment's CSV looks.

    Attributes:
        name: the experiment's name (``python -m ttr_edu.experiments NAME``).
        fields: the columns of a row as the cell function returns it, in order (the runner appends
            :data:`RUNNER_FIELDS`).
        key: the columns that name a cell (a subset of ``fields``); each cell dict holds exactly these.
        types: a parser per non-text column: ``int``, ``float`` or ``bool`` (``"True"``/``"False"``).
        timing: columns that differ between two runs of the same cell (seconds); every other column of a cell's row
            is the same wherever the cell runs.
    """

    name: str
    fields: tuple[str, ...]
    key: tuple[str, ...]
    types: dict[str, Callable[[str], Any]] = field(default_factory=dict)
    timing: tuple[str, ...] = ()

    def __post_init__(self):
        missing = [k for k in (*self.key, *self.types, *self.timing) if k not in self.fields]
        if missing:
            raise ValueError(f"fields: {', '.join(missing)} named in key/types/timing but not among the fields")

    @property
    def columns(self) -> tuple[str, ...]:
        """The CSV's columns: the fields, then :data:`RUNNER_FIELDS`."""
        return (*self.fields, *RUNNER_FIELDS)

    def cell_of(self, row: dict) -> tuple:
        """The key of ``row`` (or of a cell dict): its values in the key columns."""
        return tuple(row[k] for k in self.key)

    def parse(self, row: dict[str, str]) -> dict:
        """A row read from the CSV (all text) with its numbers and booleans parsed.

        Raises:
            ValueError: a value that does not parse (the message names the column).
        """
        parsed = {}
        for name, text in row.items():
            kind = self.types.get(name)
            try:
                parsed[name] = text if kind is None else (_bool(text) if kind is bool else kind(text))
            except (TypeError, ValueError) as error:
                raise ValueError(f"column {name}: {error}") from None
        return parsed


class ResumeRefused(ValueError):
    """A CSV that :func:`run` will not append to: another experiment, recipe or version, or a damaged row."""


@dataclass
class RunResult:
    """What :func:`run` returns.

    Attributes:
        rows: the rows of the grid's cells that exist (kept from the CSV or trained now), in the cells' order.
        trained: how many cells this call trained.
        lost: the cells whose worker died (Dask); ``resume`` trains them again.
        wall_seconds, cpu_seconds: this call's wall time, and the CPU time the cells report (summed).
    """

    rows: list[dict]
    trained: int
    lost: list[dict]
    wall_seconds: float
    cpu_seconds: float


class OutputError(OSError):
    """The CSV could not be written (a full disk, a file that cannot be opened); the rows written before stay."""


def recipe_hash(recipe: dict, code: dict[str, str] | None = None) -> str:
    """The ``recipe`` column: the first 12 hex digits of the SHA-256 of the recipe's canonical JSON (sorted keys),
    and, when given, of the training code's digest (:func:`ttr_edu.experiments.provenance.training_code`), so that
    rows trained by other code carry another hash."""
    covered = recipe if code is None else {"recipe": recipe, "training code": code_digest(code)}
    return hashlib.sha256(json.dumps(covered, sort_keys=True).encode()).hexdigest()[:12]


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _line(values: Iterable) -> str:
    """One CSV line, ending in a newline (written with one ``write`` so a row is never half on disk)."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(list(values))
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------------------------------
# Reading a grid CSV
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class _Parsed:
    meta: dict[str, str]  # "# name: value" lines before the column line (the first of each name)
    rows: list[dict]
    repair: str | None  # "complete": the last line is a whole row without its newline; "drop": a cut row; None
    keep_bytes: int  # the file's length without a cut last line


def _parse(experiment: Experiment, data: bytes, path: str | Path, legacy: bool = False) -> _Parsed:
    """Read ``data`` (the bytes of the file ``path``) as a CSV of ``experiment``, strictly.

    Raises:
        ValueError: not such a CSV (other columns, a row that does not parse), named with the file and line.
    """
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not a text file, so not a CSV of the {experiment.name} grid") from None
    lines = text.split("\n")
    unterminated = lines[-1] != ""
    if not unterminated:
        lines = lines[:-1]
    meta: dict[str, str] = {}
    rows: list[dict] = []
    header_seen = False
    columns_in_file = experiment.columns
    repair = None
    keep = len(data)
    for number, line in enumerate(lines, start=1):
        last = number == len(lines)
        if line.startswith("#"):
            name, _, value = line[1:].strip().partition(": ")
            if not header_seen:
                meta.setdefault(name, value)
            if last and unterminated:
                repair = "complete"
            continue
        if not header_seen:
            columns = next(csv.reader([line]), [])
            if legacy and tuple(columns) == experiment.fields:  # written before the runner added its columns
                columns_in_file = experiment.fields
                header_seen = True
                continue
            if tuple(columns) != experiment.columns:
                shown = ", ".join(columns[:6]) + (", ..." if len(columns) > 6 else "")
                raise ValueError(
                    f"{path} is not a CSV of the {experiment.name} grid: its columns are {shown or 'none'}"
                )
            header_seen = True
            continue
        values = next(csv.reader([line]), [])
        try:
            if len(values) != len(columns_in_file):
                raise ValueError(f"{len(values)} values for {len(columns_in_file)} columns")
            row = experiment.parse(dict(zip(columns_in_file, values)))
        except ValueError as error:
            if last and unterminated:  # a row cut short by a killed run: dropped, its cell trained again
                repair, keep = "drop", len(data) - len(line.encode())
                continue
            raise ValueError(f"{path}, line {number}: not a row of the {experiment.name} grid ({error})") from None
        if last and unterminated:
            repair = "complete"
        rows.append(row)
    if not header_seen:
        raise ValueError(f"{path} is not a CSV of the {experiment.name} grid: it has no column line")
    return _Parsed(meta, rows, repair, keep)


def read(
    experiment: Experiment, path: str | Path | None = None, *, text: str | None = None, legacy: bool = False
) -> tuple[dict, list[dict]]:
    """The provenance lines and the parsed rows of a grid CSV (a file, or its ``text``).

    ``legacy=True`` also reads a CSV written before the runner existed (the experiment's fields only, without the
    ``recipe`` and ``version`` columns); its rows then lack those two keys.

    Returns:
        ``(meta, rows)``: ``meta`` maps each ``# name: value`` line above the column line to its value (``command``,
        ``git commit``, ``recipe`` (parsed from JSON), ``ttr-edu``, ...); ``rows`` are dicts keyed by the columns.

    Raises:
        ValueError: not a CSV of ``experiment``, or a row that does not parse (file and line named). A last line cut
            short (no newline, not a whole row) is skipped.
    """
    if text is not None:
        parsed = _parse(experiment, text.encode(), path or "the text", legacy)
    else:
        parsed = _parse(experiment, Path(path).read_bytes(), path, legacy)
    meta: dict[str, Any] = dict(parsed.meta)
    if "recipe" in meta:
        try:
            meta["recipe"] = json.loads(meta["recipe"])
        except json.JSONDecodeError:
            raise ValueError(f"{path}: its recipe line is not JSON") from None
    return meta, parsed.rows


def _differences(there: dict, here: dict, prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(there) | set(here)):
        a, b = there.get(key, "(absent)"), here.get(key, "(absent)")
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {json.dumps(a)} there, {json.dumps(b)} here")
    return out


def _resume_check(experiment: Experiment, path: Path, recipe: dict, code: dict[str, str], version: str) -> _Parsed:
    """The parsed CSV ``path`` if it was written with ``recipe``, ``code`` and ``version``; nothing is written.

    Raises:
        ResumeRefused: another experiment, recipe, training code or version, or a damaged row (each named).
    """
    try:
        parsed = _parse(experiment, path.read_bytes(), path)
    except ValueError as error:
        raise ResumeRefused(f"{error}; write to another file") from None
    written = parsed.meta.get("recipe")
    if written is None:
        raise ResumeRefused(f"{path} records no recipe, so its rows cannot be checked; write to another file")
    try:
        written = json.loads(written)
    except json.JSONDecodeError:
        raise ResumeRefused(f"{path}: its recipe line is not JSON") from None
    here = json.loads(json.dumps(recipe))  # as the header holds it: tuples become lists
    if written != here:
        shown = "; ".join(_differences(written, here)[:4])
        raise ResumeRefused(
            f"{path} was written with another recipe ({shown}); resume with the options it was started with, or "
            "write to another file"
        )
    try:
        there_code = json.loads(parsed.meta.get("training code", "").partition(" ")[2] or "null")
    except json.JSONDecodeError:
        there_code = None
    if there_code != code:
        raise ResumeRefused(
            f"{path} was trained by other code ({_code_changes(there_code, code)}); check out the "
            "commit its header names, or write to another file"
        )
    there = parsed.meta.get("ttr-edu")
    if there != version:
        raise ResumeRefused(f"{path} was written by ttr-edu {there}, this is {version}; write to another file")
    expected = recipe_hash(recipe, code)
    for row in parsed.rows:
        if row["recipe"] != expected or row["version"] != version:
            raise ResumeRefused(
                f"{path} holds a row of recipe {row['recipe']} (ttr-edu {row['version']}) under a header of recipe "
                f"{expected} (ttr-edu {version}); write to another file"
            )
    return parsed


def _code_changes(there: dict | None, here: dict[str, str]) -> str:
    if not isinstance(there, dict):
        return "its header records no training code"
    changed = [name for name in here if name in there and there[name] != here[name]]
    gone, new = [n for n in there if n not in here], [n for n in here if n not in there]
    parts = [
        f"{label}: {', '.join(names[:4])}{' ...' if len(names) > 4 else ''}"
        for label, names in (("changed", changed), ("only there", gone), ("only here", new))
        if names
    ]
    return "; ".join(parts)


def _interrupted_empty(path: Path) -> bool:
    """Whether ``path`` is what an earlier version left when a Ctrl-C came before its column line: only ``#`` lines,
    one of them ``# interrupted: ..., 0 cells written; ...``. It holds no row, so ``resume`` starts it afresh."""
    try:
        lines = path.read_bytes().decode().splitlines()
    except (OSError, UnicodeDecodeError):
        return False
    return all(line.startswith("#") for line in lines) and any(
        line.startswith("# interrupted:") and ", 0 cells written;" in line for line in lines
    )


def _repair(path: Path, parsed: _Parsed, note: Callable[[str], None]) -> None:
    """Drop a cut last row, or end a whole last line with its newline, before rows are appended."""
    if parsed.repair == "drop":
        with path.open("r+b") as handle:
            handle.truncate(parsed.keep_bytes)
        note(f"note: {path} ended in a cut row (a run stopped mid-write); dropped it, its cell is trained again")
    elif parsed.repair == "complete":
        with path.open("ab") as handle:
            handle.write(b"\n")
        note(f"note: {path} did not end with a newline; added one")


class _Output:
    """The CSV, opened unbuffered: each line is one ``write`` to the file, so nothing waits in a buffer to be lost or
    to fail later, and a write that fails (a full disk) raises :class:`OutputError` at once."""

    def __init__(self, path: Path, append: bool) -> None:
        self.path = path
        try:
            self.handle = path.open("ab" if append else "wb", buffering=0)
        except OSError as error:
            raise OutputError(error.errno, f"cannot open {path}: {error.strerror}") from None

    def write(self, text: str) -> None:
        data = memoryview(text.encode())
        try:
            while data:
                data = data[self.handle.write(data) :]
        except OSError as error:
            raise OutputError(error.errno, f"cannot write {self.path}: {error.strerror}") from None

    def close(self) -> None:
        self.handle.close()


# ---------------------------------------------------------------------------------------------------------------------
# Running the cells
# ---------------------------------------------------------------------------------------------------------------------


def _paired(cell_fn, cell):
    return cell, cell_fn(cell)


def run(
    experiment: Experiment,
    recipe: dict,
    cells: list[dict] | Callable[[list[dict]], list[dict]],
    cell_fn: Callable[[dict], dict],
    out: str | Path | None = None,
    *,
    resume: bool = False,
    jobs: int = 1,
    scheduler: str | None = None,
    command: str | None = None,
    progress: bool | None = None,
    note: Callable[[str], None] | None = None,
) -> RunResult:
    """Run every cell of a grid not already in ``out``; append each row to ``out`` as soon as it is done.

    Args:
        experiment: the CSV's description.
        recipe: what every cell shares, JSON-able; recorded in the header, hashed (with the training code) into
            every row.
        cells: one dict per cell, keyed by ``experiment.key``; duplicates are run once. Or a function
            ``cells(rows) -> list`` of the rows done so far, called again after each round of cells until it asks
            for nothing new (a learning-rate sweep whose later seeds run at the best rate of the first); it may
            have a ``remaining(rows) -> int`` method counting the cells still to run, for the ``# resumed`` line.
        cell_fn: ``cell_fn(cell) -> row`` (a dict with ``experiment.fields``), picklable for ``jobs > 1`` and Dask
            (a module-level function, or a ``functools.partial`` of one). Its module and the ``ttr_edu`` modules it
            imports are the training code the header records.
        out: the CSV; ``None`` keeps the rows in memory only.
        resume: keep the rows already in ``out`` (refused unless written with this recipe, training code and
            version) and run the rest. Without it an existing ``out`` is overwritten, once the cluster answers.
        jobs: local worker processes (joblib); 1 runs the cells here, in order.
        scheduler: ``None`` (local), ``"local:N"`` or a Dask scheduler address such as ``"tcp://host:8786"``.
        command: recorded in the header (default: this process's command line).
        progress: a bar over the cells (``None``: only in a terminal).
        note: where the runner's notes go (default: one line each on stderr).

    Returns:
        A :class:`RunResult`; its ``rows`` follow the order of ``cells``, without the lost ones.

    Raises:
        ResumeRefused: ``resume`` on a CSV of another experiment, recipe, training code or version, or with a
            damaged row that is not the last line (a ``ValueError``); the file is left as it was.
        SchedulerError: a malformed ``scheduler``, or no Dask scheduler answering there (a ``ValueError``);
            ``out`` is left as it was.
        OutputError: ``out`` cannot be opened or written (an ``OSError``); the rows written before stay.
        ValueError: a bad ``jobs``.
        KeyboardInterrupt: passed on after the rows so far are written and a ``# interrupted`` line closes the file.
    """
    note = note or (lambda message: print(message, file=sys.stderr))
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs: expected a positive int, got {jobs!r}")
    if scheduler is not None:
        workers.check_scheduler(scheduler)
    version = package_version()
    code = training_code(cell_fn)
    digest = recipe_hash(recipe, code)
    path = None if out is None else Path(out)
    done: dict[tuple, dict] = {}
    kept = None
    if path is not None and resume and path.exists() and path.stat().st_size > 0 and not _interrupted_empty(path):
        kept = _resume_check(experiment, path, recipe, code, version)
        done = {experiment.cell_of(row): row for row in kept.rows}
    cells_for = cells if callable(cells) else (lambda rows, listed=list(cells): listed)
    order: dict[tuple, dict] = {}  # every cell asked for so far, in order

    def pending() -> list[dict]:
        for cell in cells_for([done[k] for k in order if k in done] if order else list(done.values())):
            order.setdefault(experiment.cell_of(cell), cell)
        return [cell for key, cell in order.items() if key not in done]

    todo = pending()
    remaining = cells.remaining(list(done.values())) if hasattr(cells, "remaining") else len(todo)
    start, cpu = time.perf_counter(), 0.0
    command = command or " ".join(["python -m ttr_edu.experiments", experiment.name, *sys.argv[1:]])
    cluster = workers.DaskCells(scheduler) if scheduler is not None and todo else None  # before the CSV is touched
    output = None
    lost: list[dict] = []
    trained = 0
    results: Iterator | None = None
    bar = tqdm(total=remaining, desc=f"{experiment.name} grid", disable=not progress_enabled(progress))
    try:
        if path is not None:
            platform = platform_lines()
            if kept is not None:
                _repair(path, kept, note)
                output = _Output(path, append=True)
                output.write(
                    f"# resumed: {_now()} at git commit {git_commit(path)} ({remaining} cells to run) with torch "
                    f"{platform['torch']}, BLAS {platform['blas']}, on {platform['cpu']}\n"
                )
            else:
                # everything the header says is gathered first (git and the Dask workers take a while), then the
                # file is created and the whole header written at once, a Ctrl-C held back: a Ctrl-C can never leave
                # a file without its column line, which --resume would refuse
                lines = {
                    "experiment": experiment.name,
                    "ttr-edu": version,
                    "command": command,
                    "git commit": git_commit(path),
                    "recipe": json.dumps(recipe),
                    "training code": f"{code_digest(code)} {json.dumps(code)}",
                    "recipe hash": digest,
                    **platform,
                    **({"dask workers": cluster.workers()} if cluster is not None else {}),
                    "started": _now(),
                }
                header = "".join(f"# {name}: {value}\n" for name, value in lines.items()) + _line(experiment.columns)
                with workers.interrupts_held():
                    output = _Output(path, append=False)
                    output.write(header)
        lost_keys: set[tuple] = set()
        while todo:  # a round of cells; a callable ``cells`` may ask for more once it sees their rows
            if cluster is not None:
                results = cluster.cells(cell_fn, todo, lost)
            elif jobs > 1 and len(todo) > 1:
                results = workers.local_cells(cell_fn, todo, jobs)
            else:
                results = (_paired(cell_fn, cell) for cell in todo)
            for cell, row in results:
                row = {**{k: row[k] for k in experiment.fields}, "recipe": digest, "version": version}
                if experiment.cell_of(row) != experiment.cell_of(cell):
                    raise RuntimeError(
                        f"cell_fn returned the row of {experiment.cell_of(row)} for {experiment.cell_of(cell)}"
                    )
                done[experiment.cell_of(row)] = row
                trained += 1
                bar.update(1)
                cpu += float(row.get("cpu_seconds", 0.0) or 0.0)
                if output is not None:
                    output.write(_line(row[c] for c in experiment.columns))
            lost_keys.update(experiment.cell_of(c) for c in lost)
            todo = [c for c in pending() if experiment.cell_of(c) not in lost_keys]
            bar.total = trained + len(todo)
            bar.refresh()
        if output is not None and trained + len(lost):
            summary = f"{trained} cells in {time.perf_counter() - start:.0f} s wall, {cpu:.0f} s CPU summed over cells"
            lost_text = f"; {len(lost)} lost (a worker died), --resume runs them" if lost else ""
            output.write(f"# finished: {_now()}, {summary}{lost_text}\n")
    except KeyboardInterrupt:
        if output is not None:
            try:
                with workers.interrupts_held():
                    output.write(f"# interrupted: {_now()}, {trained} cells written; --resume runs the rest\n")
            except OutputError:
                pass
        raise
    finally:
        if results is not None:  # stopped between two results: the workers' generator stops them now, not at exit
            with workers.interrupts_held():
                results.close()
        bar.close()
        if cluster is not None:
            cluster.close()
        if output is not None:
            output.close()
    rows = [done[k] for k in order if k in done]
    return RunResult(rows, trained, lost, time.perf_counter() - start, cpu)


# ---------------------------------------------------------------------------------------------------------------------
# The command line shared by the experiments
# ---------------------------------------------------------------------------------------------------------------------


class ArgumentParser(argparse.ArgumentParser):
    """``argparse`` with an error that is one line (``prog: error: ...``) and exit status 2, without the usage."""

    def error(self, message: str):  # argparse's hook
        self.exit(2, f"{self.prog}: error: {message}\n")


def add_arguments(parser: argparse.ArgumentParser, default_out: str) -> None:
    """Add ``--out``, ``--resume``, ``--jobs``, ``--scheduler`` and ``--progress`` to an experiment's parser."""
    parser.add_argument("--out", default=default_out, help="the CSV to write (default: %(default)s)")
    parser.add_argument(
        "--resume", action="store_true", help="keep the rows already in --out (same recipe only) and run the rest"
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="cells run at once in local processes, one thread each (default 1)"
    )
    parser.add_argument(
        "--scheduler",
        default=None,
        help="run the cells on Dask: local:N (a LocalCluster of N worker processes) or tcp://HOST:8786 (needs the "
        "cluster extra: pip install 'ttr-edu[cluster]')",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress bar over the cells (default: only in a terminal)",
    )


def runner_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict:
    """Check the runner's arguments before anything runs; return ``run``'s keyword arguments (``out``, ``resume``,
    ``jobs``, ``scheduler``, ``progress``). Every problem is a one-line ``parser.error`` (exit status 2)."""
    out = Path(args.out)
    if out.is_dir():
        parser.error(f"--out: {args.out} is a folder; give a file name such as {Path(args.out) / 'grid.csv'}")
    if not out.parent.exists():
        parser.error(f"--out: the folder {out.parent} does not exist")
    if out.exists() and not os.access(out, os.W_OK) or not os.access(out.parent, os.W_OK):
        parser.error(f"--out: {args.out} cannot be written here")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if args.jobs < 1 or args.jobs > cores:
        parser.error(f"--jobs: expected 1 to {cores} (this machine's cores), got {args.jobs}")
    if args.scheduler is not None:
        if args.jobs != 1:
            parser.error("--jobs and --scheduler: give one of them (local:N sets the number of Dask workers)")
        try:
            parsed = workers.check_scheduler(args.scheduler)
        except SchedulerError as error:
            parser.error(f"--{error}")
        if isinstance(parsed, int) and parsed > cores:
            parser.error(f"--scheduler: local:N needs N from 1 to {cores} (this machine's cores), got {args.scheduler}")
        if importlib.util.find_spec("distributed") is None:  # found, not imported: that takes seconds
            parser.error(
                f"--scheduler needs Dask (dask[distributed]), which the [cluster] extra installs: "
                f"{pip_install_extra('cluster')}"
            )
    return {
        "out": out,
        "resume": args.resume,
        "jobs": args.jobs,
        "scheduler": args.scheduler,
        "progress": args.progress,
    }


def command_line(name: str, argv: list[str] | None) -> str:
    """The command recorded in a CSV's header: ``python -m ttr_edu.experiments NAME ARGS``."""
    return " ".join(["python -m ttr_edu.experiments", name, *(sys.argv[1:] if argv is None else argv)])


def guarded(main: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    """Wrap an experiment's ``main`` so that each way it can stop is one line on stderr and an exit status:

    * Ctrl-C, whenever it comes (a second one is ignored): 130;
    * a refused ``--resume``: 2;
    * a scheduler that does not answer, an ``--out`` that cannot be written, a local worker process that died: 1.
    """

    def wrapper(argv: list[str] | None = None) -> int:
        from concurrent.futures.process import BrokenProcessPool

        # called from Python: the first Ctrl-C stops the run, later ones are ignored until it returns; the command
        # line (python -m ttr_edu.experiments) installs workers.stop_once itself and keeps later ones ignored to the end
        ours = threading.current_thread() is threading.main_thread()
        ours = ours and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        previous = signal.signal(signal.SIGINT, workers.stop_once) if ours else None
        try:
            return main(argv)
        except KeyboardInterrupt:
            workers.say_interrupted()
            return 130
        except ResumeRefused as error:
            print(f"error: --resume: {error}", file=sys.stderr)
            return 2
        except SchedulerError as error:
            print(f"error: --{error}", file=sys.stderr)
            return 1
        except OutputError as error:
            print(f"error: --out: {error.strerror}", file=sys.stderr)
            return 1
        except BrokenProcessPool as error:
            print(
                f"error: a worker process died ({error}); the rows written so far are kept; --resume runs the rest",
                file=sys.stderr,
            )
            return 1
        finally:
            if ours:
                signal.signal(signal.SIGINT, previous)

    wrapper.__doc__ = getattr(main, "__doc__", None)
    wrapper.__wrapped__ = main
    return wrapper


def report_lost(result: RunResult, experiment: Experiment) -> int:
    """Print one line naming the cells lost to dead workers; the exit status: 1 if any, else 0."""
    if not result.lost:
        return 0
    names = "; ".join(", ".join(f"{k}={cell[k]}" for k in experiment.key) for cell in result.lost[:3])
    more = f" and {len(result.lost) - 3} more" if len(result.lost) > 3 else ""
    print(f"lost {len(result.lost)} cell(s) to a dead worker ({names}{more}); --resume runs them", file=sys.stderr)
    return 1
