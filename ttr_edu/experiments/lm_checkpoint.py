"""``python -m ttr_edu.experiments.lm_checkpoint``: train the small language models the package ships.

The language-modelling chapter generates text from two trained :class:`~ttr_edu.models.lm.TinyLM`, a DeltaNet and a
softmax-attention model, shipped as package data (:data:`CHECKPOINTS`, under 1 MB each; the DeltaNet one is
:data:`ttr_edu.models.lm.SHIPPED_CHECKPOINT`). This module is their recipe: the grid's model and training loop
(:func:`ttr_edu.experiments.lm.train_cell`) with one change, more steps (:data:`RECIPE`), so that their samples look
like Python; the two differ only in the mixer, and share the seed. A checkpoint records the recipe, the corpus hash,
the Python and torch versions, the training time and its bits per byte on the whole valid and test splits;
``tests/models/test_lm_checkpoint.py`` loads each and reproduces the recorded valid bits per byte.

    python -m ttr_edu.experiments.lm_checkpoint                     # rewrite both shipped checkpoints
    python -m ttr_edu.experiments.lm_checkpoint --mixer softmax     # one of them
    python -m ttr_edu.experiments.lm_checkpoint --mixer softmax --out my.pt   # somewhere else

Each trains on one thread for about 10 minutes on an idle laptop core.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from ttr_edu.experiments.lm import FULL_GRID, LMGrid, train_cell
from ttr_edu.models.lm import SHIPPED_CHECKPOINT, save_checkpoint

__all__ = ["RECIPE", "MIXER", "SEED", "CHECKPOINTS", "train_checkpoint", "main"]

#: The grid's model, batch, window and learning rate (:data:`ttr_edu.experiments.lm.FULL_GRID`), trained longer.
RECIPE: LMGrid = replace(FULL_GRID, mixers=("deltanet",), seeds=(0,), steps=4000)
MIXER, SEED = "deltanet", 0
#: mixer -> the file its shipped checkpoint lives in: the same recipe and seed, another mixer.
CHECKPOINTS = {"deltanet": SHIPPED_CHECKPOINT, "softmax": SHIPPED_CHECKPOINT.with_name("softmax_stdlib.pt")}


def train_checkpoint(
    out: str | Path | None = None, recipe: LMGrid = RECIPE, mixer: str = MIXER, seed: int = SEED
) -> dict:
    """Train one model by ``recipe`` on one thread, save it to ``out`` (default: the mixer's file in
    :data:`CHECKPOINTS`) with its metadata, and return the metadata.

    The metadata are the grid's CSV row (:func:`~ttr_edu.experiments.lm.train_cell`: bits per byte on the whole valid
    and test splits, corpus hash, Python version, seconds) plus the recipe and the torch version.
    """
    if out is None:
        if mixer not in CHECKPOINTS:
            raise ValueError(f"out: {mixer!r} has no shipped checkpoint ({sorted(CHECKPOINTS)}); give a file")
        out = CHECKPOINTS[mixer]
    torch.set_num_threads(1)
    recipe = replace(recipe, mixers=(mixer,), seeds=(seed,))
    row, model = train_cell(recipe, mixer, seed, return_model=True)
    metadata = {**row, "recipe": asdict(recipe), "torch_version": str(torch.__version__)}
    save_checkpoint(model, out, metadata)
    return metadata


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m ttr_edu.experiments.lm_checkpoint", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--mixer", choices=[*CHECKPOINTS, "all"], default="all", help="which checkpoint to train")
    parser.add_argument("--out", default=None, help="where to write it (default: the shipped file; one mixer only)")
    args = parser.parse_args(argv)
    mixers = list(CHECKPOINTS) if args.mixer == "all" else [args.mixer]
    if args.out is not None and len(mixers) > 1:
        parser.error("--out names one file: give --mixer too")
    for mixer in mixers:
        start, cpu = time.perf_counter(), time.process_time()
        metadata = train_checkpoint(args.out, mixer=mixer)
        print(
            f"{args.out or CHECKPOINTS[mixer]}: {metadata['mixer']}, {metadata['steps']} steps, valid "
            f"{metadata['valid_bpb']:.4f} and test {metadata['test_bpb']:.4f} bits per byte; "
            f"{time.perf_counter() - start:.0f} s wall, {time.process_time() - cpu:.0f} s CPU"
        )


if __name__ == "__main__":
    main()
