"""``python -m ttr_edu.experiments mqar_memories``: MQAR rows for the adaptive-step and deep-memory mixers.

A separate, small grid beside the main one (:mod:`ttr_edu.experiments.mqar`, whose model it reuses): DeltaNet as the
baseline, Longhorn, DeltaProduct (``n_h = 2``), TTT-Linear and TTT-MLP (the MLP memory whose chunk form trains at CPU
speed; Titans' token loop is too slow to train here). Each cell is the main grid's :class:`MQARModel` with its mixer
swapped for one of :data:`ttr_edu.layers_memory.MEMORY_MIXERS`, trained by the same :func:`ttr_edu.train.train`.

    python -m ttr_edu.experiments mqar_memories --out mqar_memories.csv
"""

from __future__ import annotations

import argparse
import csv
import time
from dataclasses import asdict, dataclass, replace

import torch

from ttr_edu.layers import MIXERS
from ttr_edu.layers_memory import MEMORY_MIXERS
from ttr_edu.models_mqar import MQARModel
from ttr_edu.mqar import mqar_batch
from ttr_edu.train import train

__all__ = ["MemoryGrid", "MEMORY_GRID", "build_model", "train_cell", "main"]

FIELDS = ["mixer", "seq_len", "num_pairs", "d_model", "state_size", "steps", "final_eval_loss", "accuracy",
          "train_seconds", "seed"]


@dataclass(frozen=True)
class MemoryGrid:
    """Mixers × pairs × widths, one seed, and the training recipe (the main grid's, at a smaller size)."""

    mixers: tuple[str, ...]
    num_pairs: tuple[int, ...]
    d_models: tuple[int, ...]
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


#: DeltaNet beside the new mixers, at one small size that trains in minutes on a loaded CPU
MEMORY_GRID = MemoryGrid(
    mixers=("deltanet", "longhorn", "deltaproduct", "ttt_linear", "ttt_mlp"), num_pairs=(4, 8), d_models=(16,),
    seq_len=32, vocab_size=64, max_steps=400, eval_every=50,
)
#: per-mixer options: DeltaProduct with two Householder steps, TTT with mini-batches of 8 and a 2× MLP
OPTIONS = {"deltaproduct": {"num_householder": 2}, "ttt_linear": {"mini_batch_size": 8},
           "ttt_mlp": {"mini_batch_size": 8, "expansion": 2}}


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


def train_cell(grid: MemoryGrid, mixer: str, num_pairs: int, d_model: int) -> dict:
    """Train one cell as :func:`ttr_edu.experiments.mqar.train_cell` does; return its CSV row."""
    g = grid
    held_out = mqar_batch(g.eval_examples, g.seq_len, num_pairs, g.vocab_size,
                          generator=torch.Generator().manual_seed(10_000 + g.seed))
    torch.manual_seed(g.seed)
    model = build_model(mixer, g.vocab_size, d_model)
    start = time.perf_counter()
    result = train(model, lambda gen: mqar_batch(g.batch_size, g.seq_len, num_pairs, g.vocab_size, generator=gen),
                   max_steps=g.max_steps, lr=g.lr, target_loss=g.target_loss, eval_every=g.eval_every,
                   eval_batches=2, seed=g.seed, progress=False)
    return {
        "mixer": mixer, "seq_len": g.seq_len, "num_pairs": num_pairs, "d_model": d_model,
        "state_size": model.state_size(g.seq_len), "steps": result.steps,
        "final_eval_loss": round(result.final_eval_loss, 5), "accuracy": round(model.accuracy(held_out), 4),
        "train_seconds": round(time.perf_counter() - start, 1), "seed": g.seed,
    }


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m ttr_edu.experiments mqar_memories [--out PATH] [--threads N] [--max-steps N]``."""
    parser = argparse.ArgumentParser(prog="python -m ttr_edu.experiments mqar_memories", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="mqar_memories.csv", help="the CSV to write")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: a shared machine)")
    parser.add_argument("--max-steps", type=int, default=None, help="override the grid's max_steps")
    parser.add_argument("--seed", type=int, default=None, help="override the grid's seed")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    grid = MEMORY_GRID
    if args.max_steps is not None:
        grid = replace(grid, max_steps=args.max_steps)
    if args.seed is not None:
        grid = replace(grid, seed=args.seed)
    start = time.perf_counter()
    with open(args.out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        for mixer, n, d in grid.cells():
            row = train_cell(grid, mixer, n, d)
            writer.writerow(row)
            handle.flush()
            print(f"  {row['mixer']:<14} N={n:<3} d={d:<3} state={row['state_size']:<6} acc={row['accuracy']:.3f} "
                  f"steps={row['steps']} {row['train_seconds']} s", flush=True)
    print(f"grid: {asdict(grid)}; {time.perf_counter() - start:.0f} s -> {args.out}")


if __name__ == "__main__":
    main()
