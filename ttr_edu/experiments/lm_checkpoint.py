"""``python -m ttr_edu.experiments.lm_checkpoint``: train the small language model the package ships.

The language-modelling chapter generates text from one trained :class:`~ttr_edu.models.lm.TinyLM`, shipped as
package data (:data:`ttr_edu.models.lm.SHIPPED_CHECKPOINT`, under 1 MB). This module is its recipe: the grid's model
and training loop (:func:`ttr_edu.experiments.lm.train_cell`) with one change, more steps (:data:`RECIPE`), so that
its samples look like Python. The checkpoint records the recipe, the corpus hash, the Python and torch versions, the
training time and its bits per byte on the whole valid and test splits; ``tests/models/test_lm_checkpoint.py`` loads
it and reproduces the recorded valid bits per byte.

    python -m ttr_edu.experiments.lm_checkpoint                 # rewrite the shipped checkpoint
    python -m ttr_edu.experiments.lm_checkpoint --out my.pt     # somewhere else

It trains on one thread for about 10 minutes on an idle laptop core.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from ttr_edu.experiments.lm import FULL_GRID, LMGrid, train_cell
from ttr_edu.models.lm import SHIPPED_CHECKPOINT, save_checkpoint

__all__ = ["RECIPE", "MIXER", "SEED", "train_checkpoint", "main"]

#: The grid's model, batch, window and learning rate (:data:`ttr_edu.experiments.lm.FULL_GRID`), trained longer.
RECIPE: LMGrid = replace(FULL_GRID, mixers=("deltanet",), seeds=(0,), steps=4000)
MIXER, SEED = "deltanet", 0


def train_checkpoint(
    out: str | Path = SHIPPED_CHECKPOINT, recipe: LMGrid = RECIPE, mixer: str = MIXER, seed: int = SEED
) -> dict:
    """Train one model by ``recipe`` on one thread, save it to ``out`` with its metadata, and return the metadata.

    The metadata are the grid's CSV row (:func:`~ttr_edu.experiments.lm.train_cell`: bits per byte on the whole valid
    and test splits, corpus hash, Python version, seconds) plus the recipe and the torch version.
    """
    torch.set_num_threads(1)
    row, model = train_cell(recipe, mixer, seed, return_model=True)
    metadata = {**row, "recipe": asdict(recipe), "torch_version": str(torch.__version__)}
    save_checkpoint(model, out, metadata)
    return metadata


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m ttr_edu.experiments.lm_checkpoint", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", default=str(SHIPPED_CHECKPOINT), help="where to write the checkpoint")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    metadata = train_checkpoint(args.out)
    print(
        f"{args.out}: {metadata['mixer']}, {metadata['steps']} steps, valid {metadata['valid_bpb']:.4f} and test "
        f"{metadata['test_bpb']:.4f} bits per byte; {time.perf_counter() - start:.0f} s"
    )


if __name__ == "__main__":
    main()
