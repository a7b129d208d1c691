"""``python -m ttr_edu.experiments mqar_memories``: MQAR rows for the adaptive-step and deep-memory mixers.

A grid beside the main one (:mod:`ttr_edu.experiments.mqar`), with the main grid's recipe: the same task (Zoology's
vocabulary, ``T >= 6 N``), batches of 32 examples, step budget, early stop, held-out set, learning-rate sweep and
seeds. It trains DeltaNet as the baseline, Longhorn, DeltaProduct (``n_h = 2``), TTT-Linear, and the two MLP
memories, TTT-MLP and Titans. Each cell is the main grid's :class:`MQARModel` around one of
:data:`ttr_edu.layers.MEMORY_MIXERS` (with the main grid's ``φ = silu``: the convolution's SiLU, once, then the L2
norm, on q and k), trained by the same :func:`ttr_edu.train.train`, through the same runner. The CSV
shipped with the package (``ttr_edu/experiments/results/mqar_memories.csv``, read by :func:`load_results`) is this
grid; chapter 09 reads it.

    python -m ttr_edu.experiments mqar_memories --jobs 2 --out mqar_memories.csv
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

import torch

from ttr_edu.layers import REGISTRY
from ttr_edu.models.mqar import MQARModel
from ttr_edu.tasks.mqar import free_slot_fraction, mqar_batch

from . import mqar, plain_help, runner

__all__ = [
    "MemoryGrid",
    "MEMORY_GRID",
    "OPTIONS",
    "EXPERIMENT",
    "build_model",
    "train_cell",
    "run_grid",
    "load_results",
    "main",
]

#: The command line that runs this grid.
PROG = "python -m ttr_edu.experiments mqar_memories"

KEY = ("mixer", "seq_len", "num_pairs", "d_model", "lr", "seed")
EXPERIMENT = runner.Experiment(
    name="mqar_memories",
    fields=(*KEY, *mqar.RESULT_FIELDS),
    key=KEY,
    types=mqar.RESULT_TYPES,
    timing=("train_seconds", "cpu_seconds"),
)

_COURSE = mqar.COURSE_GRID


@dataclass(frozen=True)
class MemoryGrid:
    """Mixers × tasks × widths × learning rates × seeds, and the training recipe (by default the course recipe of
    the main grid, :data:`ttr_edu.experiments.mqar.COURSE_GRID`: its batches, step budget, early stop, held-out set,
    random filler, learning rates, every rate with every seed).

    Raises:
        ValueError: a task with ``T < 6 N``, or a batch of fewer than 32 examples.
    """

    mixers: tuple[str, ...]
    tasks: tuple[tuple[int, int], ...]
    d_models: tuple[int, ...]
    lrs: tuple[float, ...] = mqar.LRS
    seeds: tuple[int, ...] = (0, 1, 2)
    vocab_size: int = _COURSE.vocab_size
    batch_size: int = _COURSE.batch_size
    max_steps: int = _COURSE.max_steps
    target_loss: float = _COURSE.target_loss
    eval_every: int = _COURSE.eval_every
    eval_examples: int = _COURSE.eval_examples
    test_seed: int = _COURSE.test_seed
    random_non_queries: bool = True
    sweep_on_first_seed: bool = _COURSE.sweep_on_first_seed

    def __post_init__(self):
        for t, n in self.tasks:
            if free_slot_fraction(t, n) < 0.5:
                raise ValueError(f"tasks: {n} pairs in {t} tokens; MQAR needs seq_len >= 6 * num_pairs = {6 * n}")
        if self.batch_size < 32:
            raise ValueError(f"batch_size: expected at least 32 examples per step, got {self.batch_size}")

    def cells(self) -> list[dict]:
        """One dict per cell, keyed by ``EXPERIMENT.key``."""
        return [
            {"mixer": m, "seq_len": t, "num_pairs": n, "d_model": d, "lr": lr, "seed": s}
            for m in self.mixers
            for t, n in self.tasks
            for d in self.d_models
            for lr in self.lrs
            for s in self.seeds
        ]

    def recipe(self) -> dict:
        """What every cell shares, and the mixers' options (:data:`OPTIONS`), recorded in the CSV's header."""
        shared = {k: v for k, v in asdict(self).items() if k not in ("mixers", "tasks", "d_models", "lrs", "seeds")}
        return {**shared, "options": {m: OPTIONS[m] for m in self.mixers if m in OPTIONS}}


#: DeltaNet beside the new mixers, on the course grid's task at its smallest width (the MLP memories and Titans' token
#: loop cost several times DeltaNet's step)
MEMORY_GRID = MemoryGrid(
    mixers=("deltanet", "longhorn", "deltaproduct", "ttt_linear", "ttt_mlp", "titans"),
    tasks=mqar.COURSE_TASKS[:1],
    d_models=(16,),
)
#: per-mixer options: DeltaProduct with two Householder steps, TTT with mini-batches of 8, 2× MLPs (TTT-MLP, Titans)
OPTIONS = {
    "deltaproduct": {"num_householder": 2},
    "ttt_linear": {"mini_batch_size": 8},
    "ttt_mlp": {"mini_batch_size": 8, "expansion": 2},
    "titans": {"expansion": 2},
}


def build_model(mixer: str, vocab_size: int, d_model: int) -> MQARModel:
    """The main grid's model around the registered ``mixer`` (:data:`ttr_edu.layers.REGISTRY`) with its
    :data:`OPTIONS`.

    Raises:
        ValueError: an unknown mixer name.
    """
    if mixer not in REGISTRY:
        raise ValueError(f"mixer: unknown name {mixer!r}; valid names are {', '.join(REGISTRY)}")
    return MQARModel(mixer, vocab_size, d_model, **OPTIONS.get(mixer, {}))


def train_cell(grid: MemoryGrid, cell: dict) -> dict:
    """Train one cell as :func:`ttr_edu.experiments.mqar.train_cell` does (one thread, restored after); return its
    CSV row."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # cells this small train fastest on one thread; restored below for the caller
    try:
        return _train_cell(grid, **cell)
    finally:
        torch.set_num_threads(threads)


def _train_cell(g: MemoryGrid, mixer: str, seq_len: int, num_pairs: int, d_model: int, lr: float, seed: int) -> dict:
    def sample(generator):
        return mqar_batch(
            g.batch_size, seq_len, num_pairs, g.vocab_size, random_non_queries=g.random_non_queries, generator=generator
        )

    test = mqar_batch(
        g.eval_examples,
        seq_len,
        num_pairs,
        g.vocab_size,
        random_non_queries=g.random_non_queries,
        generator=torch.Generator().manual_seed(g.test_seed),
    )
    torch.manual_seed(seed)
    model = build_model(mixer, g.vocab_size, d_model)
    start, cpu_start = time.perf_counter(), time.process_time()
    steps, final_eval_loss, accuracy = mqar.train_or_diverge(
        model,
        sample,
        test,
        max_steps=g.max_steps,
        lr=lr,
        target_loss=g.target_loss,
        eval_every=g.eval_every,
        eval_batches=2,
        seed=seed,
        progress=False,
    )
    return {
        "mixer": mixer,
        "seq_len": seq_len,
        "num_pairs": num_pairs,
        "d_model": d_model,
        "lr": lr,
        "seed": seed,
        "vocab_size": g.vocab_size,
        "batch_size": g.batch_size,
        "test_seed": g.test_seed,
        "state_size": model.state_size(seq_len),
        "steps": steps,
        "final_eval_loss": final_eval_loss,
        "accuracy": accuracy,
        "train_seconds": round(time.perf_counter() - start, 2),
        "cpu_seconds": round(time.process_time() - cpu_start, 2),
    }


def run_grid(
    grid: MemoryGrid = MEMORY_GRID,
    out: str | Path | None = None,
    *,
    jobs: int = 1,
    resume: bool = False,
    scheduler: str | None = None,
    command: str | None = None,
    progress: bool | None = None,
) -> list[dict]:
    """Train every cell of ``grid`` through :func:`ttr_edu.experiments.runner.run`; return the rows in cell order.

    Raises:
        ValueError: ``jobs`` is not a positive int.
        ttr_edu.experiments.runner.ResumeRefused: ``resume`` on a CSV of another recipe.
    """
    result = runner.run(
        EXPERIMENT,
        grid.recipe(),
        mqar.sweep(grid.cells(), first_seed_only=grid.sweep_on_first_seed),
        partial(train_cell, grid),
        out,
        resume=resume,
        jobs=jobs,
        scheduler=scheduler,
        command=command or "ttr_edu.experiments.mqar_memories.run_grid, called from Python",
        progress=progress,
    )
    return result.rows


def load_results(path: str | Path | None = None, *, show: bool = True) -> list[dict]:
    """Read a memories-grid CSV (default: the one shipped in ``ttr_edu/experiments/results/mqar_memories.csv``) as
    typed dicts; ``show`` prints its provenance lines."""
    from importlib import resources

    if path is None:
        text = resources.files("ttr_edu.experiments").joinpath("results", "mqar_memories.csv").read_text()
        rows = runner.read(EXPERIMENT, "mqar_memories.csv", text=text)[1]
    else:
        text = Path(path).read_text()
        rows = runner.read(EXPERIMENT, path)[1]
    if show:
        print("\n".join(line[2:] for line in text.splitlines() if line.startswith("# ")))
    return rows


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m ttr_edu.experiments mqar_memories [--out PATH] [--jobs N | --scheduler ADDRESS]
    [--resume] [--max-steps N] [--seeds S ...]``; returns the exit status."""
    return _main(argv)


@runner.guarded
def _main(argv: list[str] | None = None) -> int:
    import argparse

    parser = runner.ArgumentParser(
        prog=PROG, description=plain_help(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--max-steps", type=int, default=None, help="override the grid's max_steps (a new recipe)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="override the grid's seeds (each >= 0)")
    runner.add_arguments(parser, "mqar_memories.csv")
    args = parser.parse_args(argv)
    options = runner.runner_options(parser, args)
    if args.max_steps is not None and args.max_steps < 1:
        parser.error(f"--max-steps: expected a positive int, got {args.max_steps}")
    if args.seeds is not None and min(args.seeds) < 0:
        parser.error(f"--seeds: expected ints >= 0, got {' '.join(map(str, args.seeds))}")
    grid = MEMORY_GRID
    if args.max_steps is not None:
        grid = replace(grid, max_steps=args.max_steps)
    if args.seeds is not None:
        grid = replace(grid, seeds=tuple(dict.fromkeys(args.seeds)))
    result = runner.run(
        EXPERIMENT,
        grid.recipe(),
        mqar.sweep(grid.cells(), first_seed_only=grid.sweep_on_first_seed),
        partial(train_cell, grid),
        command=runner.command_line("mqar_memories", argv),
        **options,
    )
    print(
        f"{result.trained} cells trained in {result.wall_seconds:.0f} s wall, {result.cpu_seconds:.0f} s CPU summed "
        f"over cells; {len(result.rows)} rows in {options['out']}"
    )
    return runner.report_lost(result, EXPERIMENT)
