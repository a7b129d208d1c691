"""``python -m ttr_edu.experiments lm``: tiny byte-level language models on the standard-library corpus.

Every cell trains one :class:`ttr_edu.models.lm.TinyLM` whose mixer is one of :data:`ttr_edu.models.lm.LM_MIXERS`
(everything else equal, parameter counts within 1 %), with Adam on random windows of the train split, then reports
bits per byte on the whole valid and test splits (:func:`ttr_edu.tasks.text.eval_windows`). A run whose loss
becomes NaN or infinite is kept as a row with ``diverged = 1``.

    python -m ttr_edu.experiments lm                  # the full grid -> lm_grid.csv
    python -m ttr_edu.experiments lm --jobs 2         # cells in 2 processes (joblib), one thread each
    python -m ttr_edu.experiments lm --resume         # finish an interrupted run (same recipe and corpus only)
    python -m ttr_edu.experiments lm --quick --out q.csv

The cells run through the shared runner (:mod:`ttr_edu.experiments.runner`: locally, or on Dask with
``--scheduler``). Each row carries the corpus hash and the Python version, and the recipe (the grid's settings and
the corpus hash) is recorded in the CSV's header, so results from another corpus or recipe are never mixed in:
``--resume`` refuses such a file. The shipped CSV (``ttr_edu/experiments/results/lm_grid.csv``) is the full grid.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from functools import partial
from importlib import resources
from pathlib import Path

import torch

from ttr_edu.experiments import runner
from ttr_edu.models.lm import LM_MIXERS, LMConfig, TinyLM, bits_per_byte, lm_loss
from ttr_edu.tasks.text import eval_windows, load_stdlib_corpus, random_windows
from ttr_edu.train import train

__all__ = ["LMGrid", "FULL_GRID", "QUICK_GRID", "train_cell", "evaluate_bpb", "run_grid", "load_results", "main"]

FIELDS = [
    "mixer",
    "seed",
    "d_model",
    "n_layers",
    "num_heads",
    "parameters",
    "seq_len",
    "batch_size",
    "steps",
    "lr",
    "final_train_loss",
    "valid_bpb",
    "test_bpb",
    "diverged",
    "train_seconds",
    "corpus_sha256",
    "python_version",
]


@dataclass(frozen=True)
class LMGrid:
    """The grid and its training recipe (defaults: the full grid).

    Attributes:
        mixers: keys of :data:`LM_MIXERS`. seeds: each cell is trained once per seed (model init and batches).
        d_model, n_layers, num_heads: the model (see :class:`LMConfig`).
        seq_len, batch_size, steps, lr: Adam at a constant ``lr`` on ``batch_size`` random windows per step.
        eval_windows: windows of each of valid and test scored at the end (``None``: the whole split).
    """

    mixers: tuple[str, ...] = tuple(LM_MIXERS)
    seeds: tuple[int, ...] = (0, 1, 2)
    d_model: int = 64
    n_layers: int = 2
    num_heads: int = 2
    seq_len: int = 128
    batch_size: int = 16
    steps: int = 600
    lr: float = 3e-3
    eval_windows: int | None = None

    def cells(self) -> list[tuple[str, int]]:
        return [(mixer, seed) for seed in self.seeds for mixer in self.mixers]


FULL_GRID = LMGrid()
#: a grid small enough for the chapter to train live (a few seconds a cell)
QUICK_GRID = LMGrid(mixers=("deltanet",), seeds=(0,), seq_len=64, batch_size=8, steps=60, eval_windows=64)


@torch.no_grad()
def evaluate_bpb(
    model: TinyLM, tokens: torch.Tensor, seq_len: int, max_windows: int | None = None, batch_size: int = 64
) -> float:
    """Bits per byte of ``model`` on a split: the mean next-byte loss over its non-overlapping windows, / ln 2.

    Args:
        tokens: a split, 1-D ``(N_bytes,)`` byte values (e.g. ``corpus.valid``).
        seq_len: tokens a window reads; ``max_windows``: keep only the first windows; ``batch_size``: windows per call.
    """
    windows = eval_windows(tokens, seq_len, max_windows)
    was_training = model.training
    model.eval()
    try:
        total = 0.0
        for batch in windows.split(batch_size):
            total += float(lm_loss(model(batch[:, :-1]), batch[:, 1:])) * len(batch)
        return bits_per_byte(total / len(windows))
    finally:
        model.train(was_training)


def train_cell(
    grid: LMGrid, mixer: str, seed: int, *, progress: bool | None = None, return_model: bool = False
) -> dict | tuple[dict, TinyLM]:
    """Train one model of ``grid`` and return its CSV row (and the model, with ``return_model``)."""
    corpus = load_stdlib_corpus()
    config = LMConfig(mixer=mixer, d_model=grid.d_model, num_heads=grid.num_heads, n_layers=grid.n_layers)
    torch.manual_seed(seed)
    model = TinyLM(config)

    def sample(generator: torch.Generator) -> torch.Tensor:
        return random_windows(corpus.train, grid.batch_size, grid.seq_len, generator)

    def loss_fn(m: TinyLM, window: torch.Tensor) -> torch.Tensor:
        return lm_loss(m(window[:, :-1]), window[:, 1:])  # position t predicts byte t + 1

    start = time.perf_counter()
    diverged, final = 0, math.nan
    try:
        result = train(
            model,
            sample,
            loss_fn=loss_fn,
            max_steps=grid.steps,
            lr=grid.lr,
            target_loss=None,
            eval_every=max(grid.steps // 4, 1),
            eval_batches=2,
            seed=seed,
            progress=progress,
            desc=f"{mixer} seed {seed}",
        )
        final = result.final_eval_loss
        valid = evaluate_bpb(model, corpus.valid, grid.seq_len, grid.eval_windows)
        test = evaluate_bpb(model, corpus.test, grid.seq_len, grid.eval_windows)
    except FloatingPointError:
        diverged, valid, test = 1, math.nan, math.nan
    row = {
        "mixer": mixer,
        "seed": seed,
        "d_model": grid.d_model,
        "n_layers": grid.n_layers,
        "num_heads": grid.num_heads,
        "parameters": model.num_parameters(),
        "seq_len": grid.seq_len,
        "batch_size": grid.batch_size,
        "steps": grid.steps,
        "lr": grid.lr,
        "final_train_loss": round(final, 5),
        "valid_bpb": round(valid, 5),
        "test_bpb": round(test, 5),
        "diverged": diverged,
        "train_seconds": round(time.perf_counter() - start, 1),
        "corpus_sha256": corpus.sha256,
        "python_version": corpus.python_version,
    }
    return (row, model) if return_model else row


def _run_one(grid: LMGrid, cell: dict) -> dict:
    """The runner's cell function: one thread per cell, so ``--jobs N`` uses N cores without oversubscription."""
    torch.set_num_threads(1)
    return train_cell(grid, cell["mixer"], cell["seed"], progress=False)


_NUMERIC = {"seed", "d_model", "n_layers", "num_heads", "parameters", "seq_len", "batch_size", "steps", "diverged"}
EXPERIMENT = runner.Experiment(
    name="lm",
    fields=tuple(FIELDS),
    key=("mixer", "seed"),
    types={
        **{name: int for name in _NUMERIC},
        **{name: float for name in ("lr", "final_train_loss", "valid_bpb", "test_bpb", "train_seconds")},
    },
    timing=("train_seconds",),
)


def recipe(grid: LMGrid) -> dict:
    """What every cell of ``grid`` shares, with the corpus it trains on (its SHA-256): the CSV's recipe."""
    corpus = load_stdlib_corpus()
    shared = {k: v for k, v in asdict(grid).items() if k not in ("mixers", "seeds")}
    return {**shared, "corpus_sha256": corpus.sha256, "python_version": corpus.python_version}


def run_grid(
    grid: LMGrid = FULL_GRID,
    out: str | Path | None = None,
    *,
    jobs: int = 1,
    progress: bool | None = None,
    resume: bool = True,
    scheduler: str | None = None,
    command: str | None = None,
) -> list[dict]:
    """Train every cell of ``grid`` not already in ``out``; append each row to ``out`` as soon as it is done.

    Args:
        jobs: cells trained at once, each in its own process (joblib); 1 runs them here, in order.
        resume: keep the rows already in ``out`` (the default); refused unless ``out`` was written with this
            recipe and corpus. ``False`` starts ``out`` afresh.
        scheduler: ``"local:N"`` or a Dask scheduler address (:func:`ttr_edu.experiments.runner.run`).

    Returns:
        The rows of the grid's cells (those found in ``out`` and the new ones), in :meth:`LMGrid.cells` order.

    Raises:
        ttr_edu.experiments.runner.ResumeRefused: ``out`` holds rows of another recipe or corpus (another Python
            version's standard library): write to another file.
    """
    cells = [{"mixer": mixer, "seed": seed} for mixer, seed in grid.cells()]
    result = runner.run(
        EXPERIMENT,
        recipe(grid),
        cells,
        partial(_run_one, grid),
        out,
        resume=resume,
        jobs=jobs,
        scheduler=scheduler,
        command=command,
        progress=progress,
    )
    return result.rows


def load_results(path: str | Path | None = None) -> list[dict]:
    """Rows of a grid CSV (default: the shipped full grid), numbers parsed; a CSV from before the runner (without
    its ``recipe`` and ``version`` columns) is read too."""
    if path is None:
        text = (resources.files("ttr_edu.experiments") / "results" / "lm_grid.csv").read_text()
        return runner.read(EXPERIMENT, "lm_grid.csv", text=text, legacy=True)[1]
    return runner.read(EXPERIMENT, path, legacy=True)[1]


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m ttr_edu.experiments lm [--quick] [--out PATH] [--jobs N | --scheduler ADDRESS]
    [--resume]``; returns the exit status."""
    return _main(argv)


@runner.guarded
def _main(argv: list[str] | None = None) -> int:
    parser = runner.ArgumentParser(prog="python -m ttr_edu.experiments lm", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the small grid the chapter trains live")
    runner.add_arguments(parser, "lm_grid.csv")
    args = parser.parse_args(argv)
    options = runner.runner_options(parser, args)
    grid = QUICK_GRID if args.quick else FULL_GRID
    print(load_stdlib_corpus().describe())
    cells = [{"mixer": mixer, "seed": seed} for mixer, seed in grid.cells()]
    result = runner.run(
        EXPERIMENT, recipe(grid), cells, partial(_run_one, grid), command=runner.command_line("lm", argv), **options
    )
    print(f"{len(result.rows)} cells in {options['out']}; this run took {result.wall_seconds:.0f} s")
    return runner.report_lost(result, EXPERIMENT)
