"""``python -m ttr_edu.experiments mqar``: train tiny one-layer models on MQAR over a grid and write a CSV.

The grid crosses every mixer of :data:`ttr_edu.layers.MIXERS` with the number of key-value pairs and the model
width (which sets the state size). Each cell trains a fresh :class:`ttr_edu.models_mqar.MQARModel` with Adam on
fresh batches, stops early once the evaluation loss is small, and reports the accuracy on a held-out batch.
Rows are appended to the CSV as cells finish, so an interrupted run keeps what it has.

    python -m ttr_edu.experiments mqar                       # the full grid -> mqar_grid.csv
    python -m ttr_edu.experiments mqar --quick --out q.csv   # the subset chapter 8 trains live
    python -m ttr_edu.experiments mqar --resume              # finish an interrupted run

The CSV shipped with the package (``ttr_edu/data/mqar_grid.csv``, read by :func:`load_results`) is the full grid.
"""

from __future__ import annotations

import argparse
import csv
import time
from dataclasses import asdict, dataclass, replace
from importlib import resources
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ttr_edu.layers import MIXERS
from ttr_edu.models_mqar import MQARModel
from ttr_edu.mqar import mqar_batch
from ttr_edu.progress import progress_enabled
from ttr_edu.train import train

__all__ = ["MQARGrid", "FULL_GRID", "QUICK_GRID", "train_cell", "run_grid", "load_results", "main"]

FIELDS = [
    "mixer", "seq_len", "num_pairs", "d_model", "state_size", "steps", "final_eval_loss", "accuracy",
    "train_seconds", "seed",
]


@dataclass(frozen=True)
class MQARGrid:
    """The grid and the training recipe (every default is the full grid's).

    Attributes:
        mixers: layer names from :data:`ttr_edu.layers.MIXERS`.
        num_pairs: key-value pairs per example (each is queried once).
        d_models: model widths; with one head a parametric layer's state is ``d_model²`` floats.
        seq_len: tokens per example; at least ``4 · max(num_pairs)``.
        vocab_size: kept small (Zoology uses 8192) so that a CPU run fits in minutes.
        batch_size, max_steps, lr: Adam on fresh batches; training stops once the evaluation loss is
            ``<= target_loss`` (checked every ``eval_every`` steps).
        eval_examples: held-out examples for the reported accuracy.
        seed: seeds the model, the training batches and the held-out batch of every cell.
    """

    mixers: tuple[str, ...] = tuple(MIXERS)
    num_pairs: tuple[int, ...] = (4, 8, 16)
    d_models: tuple[int, ...] = (16, 32)
    seq_len: int = 64
    vocab_size: int = 128
    batch_size: int = 32
    max_steps: int = 600
    lr: float = 1e-2
    target_loss: float = 0.05
    eval_every: int = 100
    eval_examples: int = 256
    seed: int = 0

    def cells(self) -> list[tuple[str, int, int]]:
        return [(m, n, d) for m in self.mixers for n in self.num_pairs for d in self.d_models]


FULL_GRID = MQARGrid()
#: the subset chapter 8 trains live: three layers, one small cell (T = 32, 4 pairs, d = 16), 200 steps, ~15 s
QUICK_GRID = MQARGrid(
    mixers=("linear_attention", "deltanet", "softmax_attention"), num_pairs=(4,), d_models=(16,), seq_len=32,
    vocab_size=64, max_steps=200, eval_every=50,
)


def train_cell(grid: MQARGrid, mixer: str, num_pairs: int, d_model: int, *, progress: bool | None = None) -> dict:
    """Train one model of the grid and return its CSV row (a dict keyed by ``FIELDS``).

    Raises:
        ValueError: an unknown mixer, or a ``seq_len`` / ``vocab_size`` too small for ``num_pairs``.
    """
    g = grid

    def sample(generator: torch.Generator):
        return mqar_batch(g.batch_size, g.seq_len, num_pairs, g.vocab_size, generator=generator)

    held_out = mqar_batch(g.eval_examples, g.seq_len, num_pairs, g.vocab_size,
                          generator=torch.Generator().manual_seed(10_000 + g.seed))
    torch.manual_seed(g.seed)
    model = MQARModel(mixer, g.vocab_size, d_model)
    start = time.perf_counter()
    result = train(model, sample, max_steps=g.max_steps, lr=g.lr, target_loss=g.target_loss, eval_every=g.eval_every,
                   eval_batches=2, seed=g.seed, progress=progress, desc=f"{mixer} N={num_pairs} d={d_model}")
    seconds = time.perf_counter() - start
    return {
        "mixer": mixer, "seq_len": g.seq_len, "num_pairs": num_pairs, "d_model": d_model,
        "state_size": model.state_size(g.seq_len), "steps": result.steps,
        "final_eval_loss": round(result.final_eval_loss, 5), "accuracy": round(model.accuracy(held_out), 4),
        "train_seconds": round(seconds, 1), "seed": g.seed,
    }


def run_grid(
    grid: MQARGrid = FULL_GRID, out: str | Path | None = None, *, resume: bool = False, progress: bool | None = None
) -> list[dict]:
    """Train every cell of ``grid``; append each row to the CSV ``out`` (if given) as soon as it is done.

    Args:
        resume: keep the rows already in ``out`` (cells with the same mixer, sequence length, pairs, width and seed)
            and train only the missing cells, so an interrupted run can be finished.

    Returns:
        The rows, in the order of :meth:`MQARGrid.cells`.
    """
    done = {}
    if resume and out is not None and Path(out).exists():
        done = {_key(row): row for row in load_results(out)}
    handle = writer = None
    if out is not None:  # resuming appends to the rows already there, so nothing done is ever rewritten
        handle = open(out, "a" if done else "w", newline="")
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        if not done:
            writer.writeheader()
    rows = []
    try:
        for mixer, n, d in tqdm(grid.cells(), desc="MQAR grid", disable=not progress_enabled(progress)):
            key = (mixer, grid.seq_len, n, d, grid.seed)
            if key in done:
                rows.append(done[key])
                continue
            row = train_cell(grid, mixer, n, d, progress=False)
            rows.append(row)
            if writer is not None:
                writer.writerow(row)
                handle.flush()
    finally:
        if handle is not None:
            handle.close()
    return rows


def _key(row: dict) -> tuple:
    return (row["mixer"], row["seq_len"], row["num_pairs"], row["d_model"], row["seed"])


def load_results(path: str | Path | None = None) -> list[dict]:
    """Read a grid CSV (default: the full grid shipped in ``ttr_edu/data/mqar_grid.csv``) as typed dicts."""
    if path is None:
        text = resources.files("ttr_edu").joinpath("data/mqar_grid.csv").read_text()
    else:
        text = Path(path).read_text()
    numbers = {"seq_len": int, "num_pairs": int, "d_model": int, "state_size": int, "steps": int,
               "final_eval_loss": float, "accuracy": float, "train_seconds": float, "seed": int}
    return [{k: numbers.get(k, str)(v) for k, v in row.items()} for row in csv.DictReader(text.splitlines())]


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m ttr_edu.experiments mqar [--quick] [--out PATH] [--threads N] [--max-steps N]``."""
    parser = argparse.ArgumentParser(prog="python -m ttr_edu.experiments mqar", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="only the subset chapter 8 trains live")
    parser.add_argument("--out", default="mqar_grid.csv", help="the CSV to write (default: mqar_grid.csv)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: a shared machine)")
    parser.add_argument("--max-steps", type=int, default=None, help="override the grid's max_steps")
    parser.add_argument("--resume", action="store_true", help="keep the cells already in --out, train the rest")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    grid = QUICK_GRID if args.quick else FULL_GRID
    if args.max_steps is not None:
        grid = replace(grid, max_steps=args.max_steps)
    start = time.perf_counter()
    rows = run_grid(grid, args.out, resume=args.resume)
    print(f"{len(rows)} cells in {time.perf_counter() - start:.0f} s -> {args.out}")
    print(f"grid: {asdict(grid)}")
    for row in rows:
        print(f"  {row['mixer']:<24} N={row['num_pairs']:<3} d={row['d_model']:<3} state={row['state_size']:<6} "
              f"acc={row['accuracy']:.3f} steps={row['steps']} {row['train_seconds']} s")


if __name__ == "__main__":
    main()
