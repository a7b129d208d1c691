"""``python -m ttr_edu.experiments mqar_memories``: MQAR rows for the adaptive-step and deep-memory mixers.

A separate, small grid beside the main one (:mod:`ttr_edu.experiments.mqar`, whose model it reuses): DeltaNet as the
baseline, Longhorn, DeltaProduct (``n_h = 2``), TTT-Linear, and the two MLP memories, TTT-MLP and Titans, over three
seeds. Each cell is the main grid's :class:`MQARModel` with its mixer swapped for one of
:data:`ttr_edu.layers_memory.MEMORY_MIXERS`, trained by the same :func:`ttr_edu.train.train`. The CSV shipped with the
package (``ttr_edu/experiments/results/mqar_memories.csv``, read by :func:`load_results`) is this grid; chapter 09 reads
it.

    python -m ttr_edu.experiments mqar_memories --jobs 2 --out mqar_memories.csv
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from ttr_edu._internal.validation import check_positive_int
from ttr_edu.layers import MEMORY_MIXERS, MIXERS
from ttr_edu.models.mqar import MQARModel
from ttr_edu.tasks.mqar import mqar_batch
from ttr_edu.train import train

from . import mqar, plain_help

__all__ = ["MemoryGrid", "MEMORY_GRID", "build_model", "train_cell", "run_grid", "load_results", "main"]

#: The command line that runs this grid.
PROG = "python -m ttr_edu.experiments mqar_memories"

FIELDS = [
    "mixer",
    "seq_len",
    "num_pairs",
    "d_model",
    "state_size",
    "steps",
    "final_eval_loss",
    "accuracy",
    "train_seconds",
    "cpu_seconds",
    "seed",
]


@dataclass(frozen=True)
class MemoryGrid:
    """Mixers × pairs × widths × seeds, and the training recipe (the main grid's, at a smaller size)."""

    mixers: tuple[str, ...]
    num_pairs: tuple[int, ...]
    d_models: tuple[int, ...]
    seeds: tuple[int, ...] = (0, 1, 2)
    seq_len: int = 64
    vocab_size: int = 128
    batch_size: int = 32
    max_steps: int = 600
    lr: float = 1e-2
    target_loss: float = 0.05
    eval_every: int = 100
    eval_examples: int = 256

    def cells(self) -> list[tuple[str, int, int, int]]:
        """``(mixer, num_pairs, d_model, seed)`` for every cell."""
        return [(m, n, d, s) for m in self.mixers for n in self.num_pairs for d in self.d_models for s in self.seeds]

    def recipe(self) -> dict:
        """What every cell shares, and the mixers' options (:data:`OPTIONS`), recorded in the CSV's header."""
        shared = {k: v for k, v in asdict(self).items() if k not in ("mixers", "num_pairs", "d_models", "seeds")}
        return {**shared, "options": {m: OPTIONS[m] for m in self.mixers if m in OPTIONS}}


#: DeltaNet beside the new mixers, at one small size that trains in minutes on a CPU
MEMORY_GRID = MemoryGrid(
    mixers=("deltanet", "longhorn", "deltaproduct", "ttt_linear", "ttt_mlp", "titans"),
    num_pairs=(4, 8),
    d_models=(16,),
    seq_len=32,
    vocab_size=64,
    max_steps=400,
    eval_every=50,
)
#: per-mixer options: DeltaProduct with two Householder steps, TTT with mini-batches of 8, 2× MLPs (TTT-MLP, Titans)
OPTIONS = {
    "deltaproduct": {"num_householder": 2},
    "ttt_linear": {"mini_batch_size": 8},
    "ttt_mlp": {"mini_batch_size": 8, "expansion": 2},
    "titans": {"expansion": 2},
}


def build_model(mixer: str, vocab_size: int, d_model: int) -> MQARModel:
    """The main grid's model with ``mixer`` taken from ``MIXERS`` or ``MEMORY_MIXERS``.

    Raises:
        ValueError: an unknown mixer name.
    """
    if mixer not in MIXERS and mixer not in MEMORY_MIXERS:
        raise ValueError(f"mixer: unknown name {mixer!r}; valid names are {', '.join([*MIXERS, *MEMORY_MIXERS])}")
    model = MQARModel("deltanet", vocab_size, d_model)  # the same embedding, norm and readout ...
    # ... around the mixer with its own defaults (SiLU + L2 keys, as the memory mixers here use)
    model.mixer = {**MIXERS, **MEMORY_MIXERS}[mixer](d_model, 1, **OPTIONS.get(mixer, {}))
    model.mixer_name = mixer
    return model


def train_cell(grid: MemoryGrid, mixer: str, num_pairs: int, d_model: int, seed: int = 0) -> dict:
    """Train one cell as :func:`ttr_edu.experiments.mqar.train_cell` does (one thread); return its CSV row."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # cells this small train fastest on one thread; restored below for the caller
    try:
        return _train_cell(grid, mixer, num_pairs, d_model, seed)
    finally:
        torch.set_num_threads(threads)


def _train_cell(g: MemoryGrid, mixer: str, num_pairs: int, d_model: int, seed: int) -> dict:
    held_out = mqar_batch(
        g.eval_examples, g.seq_len, num_pairs, g.vocab_size, generator=torch.Generator().manual_seed(10_000 + seed)
    )
    torch.manual_seed(seed)
    model = build_model(mixer, g.vocab_size, d_model)
    start, cpu_start = time.perf_counter(), time.process_time()
    result = train(
        model,
        lambda gen: mqar_batch(g.batch_size, g.seq_len, num_pairs, g.vocab_size, generator=gen),
        max_steps=g.max_steps,
        lr=g.lr,
        target_loss=g.target_loss,
        eval_every=g.eval_every,
        eval_batches=2,
        seed=seed,
        progress=False,
    )
    return {
        "mixer": mixer,
        "seq_len": g.seq_len,
        "num_pairs": num_pairs,
        "d_model": d_model,
        "state_size": model.state_size(g.seq_len),
        "steps": result.steps,
        "final_eval_loss": round(result.final_eval_loss, 5),
        "accuracy": round(model.accuracy(held_out), 4),
        "train_seconds": round(time.perf_counter() - start, 1),
        "cpu_seconds": round(time.process_time() - cpu_start, 1),
        "seed": seed,
    }


def run_grid(
    grid: MemoryGrid = MEMORY_GRID, out: str | Path | None = None, *, jobs: int = 1, command: str | None = None
) -> list[dict]:
    """Train every cell of ``grid`` (``jobs`` at once, joblib workers); write the CSV ``out`` with its provenance.

    ``command`` is recorded in the CSV's header (:func:`main` passes its command line).

    Returns:
        The rows, in the order of :meth:`MemoryGrid.cells`.

    Raises:
        ValueError: ``jobs`` is not a positive int.
    """
    check_positive_int("jobs", jobs)
    cells = grid.cells()
    start = time.perf_counter()
    if jobs > 1 and len(cells) > 1:
        from joblib import Parallel, delayed

        rows = Parallel(n_jobs=jobs)(delayed(train_cell)(grid, *cell) for cell in cells)
    else:
        rows = [train_cell(grid, *cell) for cell in cells]
    if out is not None:
        command = command or "ttr_edu.experiments.mqar_memories.run_grid, called from Python"
        with open(out, "w", newline="") as handle:
            handle.write(
                f"# command: {command}\n# finished: {mqar._now()}, {len(cells)} cells in "
                f"{time.perf_counter() - start:.0f} s wall, {sum(r['cpu_seconds'] for r in rows):.0f} s "
                f"CPU summed over cells\n# git commit: {mqar._git_commit(out)}\n"
                f"# recipe: {json.dumps(grid.recipe())}\n"
            )
            writer = csv.DictWriter(handle, fieldnames=FIELDS)
            writer.writeheader()
            writer.writerows(rows)
    return rows


def load_results(path: str | Path | None = None, *, show: bool = True) -> list[dict]:
    """Read a memories-grid CSV (default: the one shipped in ``ttr_edu/experiments/results/mqar_memories.csv``) as typed
    dicts."""
    return mqar.load_results(path, show=show, shipped="mqar_memories.csv")


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m ttr_edu.experiments mqar_memories [--out PATH] [--jobs N] [--max-steps N]
    [--seeds S ...]``."""
    parser = argparse.ArgumentParser(
        prog=PROG, description=plain_help(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="mqar_memories.csv", help="the CSV to write")
    parser.add_argument("--jobs", type=int, default=1, help="cells trained at once, one thread each (default 1)")
    parser.add_argument("--max-steps", type=int, default=None, help="override the grid's max_steps")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="override the grid's seeds")
    args = parser.parse_args(argv)
    grid = MEMORY_GRID
    if args.max_steps is not None:
        grid = replace(grid, max_steps=args.max_steps)
    if args.seeds is not None:
        grid = replace(grid, seeds=tuple(args.seeds))
    argv = sys.argv[1:] if argv is None else argv
    rows = run_grid(grid, args.out, jobs=args.jobs, command=" ".join([PROG, *argv]))
    for row in rows:
        print(
            f"  {row['mixer']:<14} N={row['num_pairs']:<3} d={row['d_model']:<3} seed={row['seed']} "
            f"state={row['state_size']:<6} acc={row['accuracy']:.3f} steps={row['steps']} {row['cpu_seconds']} s"
        )
    print(f"grid: {asdict(grid)} -> {args.out}")


if __name__ == "__main__":
    main()
