"""Setting 1 of Schlag, Irie and Schmidhuber (2021, §6.1, Figure 2): how many keys a fast-weight memory holds.

For each feature map (``d_k = 16``, so ELU+1 has ``d_dot = 16`` and DPFP ν = 1, 2, 3 have 32, 64, 96) and each
number of unique keys ``S``, train a single-layer sum-rule model on setting 1 and record its best evaluation loss.
With trained key and query projections the loss stays near 0 until ``S`` approaches ``d_dot`` and then rises (the
model can give at most ``d_dot`` keys a private feature that only their own query reads, which exact retrieval
needs; near that limit, whether training finds such a packing varies from seed to seed); with fixed random keys it
degrades smoothly from the start. FAVOR+ (random features redrawn every call) and softmax attention are the paper's
two references.

Run the full grid (writes CSV, shows progress bars)::

    python -m ttr_edu.experiments capacity --out capacity_grid.csv

The shipped ``results/capacity_grid.csv`` holds :data:`SEEDS` (the ``train_seed`` column): every point for seed 0,
and for seeds 1 and 2 the trained points up to each memory's ``d_dot`` (those beyond it fail in seed 0 and cost the
full step budget), FAVOR+ at S = 4 and 8, softmax and every random-key point; each seed is one ``--seed`` run,
concatenated.

The paper's scale is ``d_k = 64``, ``S`` up to 600, Adam 1e-3 until the loss is ≤ 1e-3; ours is ``d_k = 16``,
``S`` up to 128, Adam 1e-2 for at most 3000 steps, so that the grid fits in about 20 minutes on two CPU cores.
"""

from __future__ import annotations

from ttr_edu.experiments.grid import ModelSpec, grid_main

__all__ = ["QUICK_STEPS", "MODELS", "S_VALUES", "D_DOT", "TRAINED_S", "SEEDS", "full_grid", "quick_grid", "main"]

#: The curves of the figure, by label.
MODELS = {
    "ELU+1": ModelSpec("ELU+1", "elu_plus_one"),
    "DPFP ν=1": ModelSpec("DPFP ν=1", "dpfp", (("nu", 1),)),
    "DPFP ν=2": ModelSpec("DPFP ν=2", "dpfp", (("nu", 2),)),
    "DPFP ν=3": ModelSpec("DPFP ν=3", "dpfp", (("nu", 3),)),
    "FAVOR+ m=16": ModelSpec("FAVOR+ m=16", "favor_plus", (("m", 16),)),
    "softmax": ModelSpec("softmax", None, update_rule="softmax"),
}
S_VALUES = (4, 8, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 112, 128)
D_DOT = {"ELU+1": 16, "DPFP ν=1": 32, "DPFP ν=2": 64, "DPFP ν=3": 96, "FAVOR+ m=16": 32}
#: Trained keys: about d_dot/4 to 1.5 d_dot for each feature map; past the cliff every point costs the full
#: step budget, so the grid stops soon after it. FAVOR+ and softmax at a few S.
TRAINED_S = {
    "ELU+1": (4, 8, 10, 12, 14, 16, 20, 24),
    "DPFP ν=1": (8, 16, 20, 22, 24, 28, 32, 40, 48),
    "DPFP ν=2": (16, 32, 48, 52, 56, 60, 64, 80, 96),
    "DPFP ν=3": (24, 48, 64, 72, 80, 84, 88, 92, 96, 112, 128),
    "FAVOR+ m=16": (4, 8, 16, 32),
    "softmax": (16, 48, 96, 128),
}


#: The training seeds of the shipped CSV (chapter 03's claims hold in each).
SEEDS = (0, 1, 2)

#: Step budget of the quick subset (a notebook cell or a smoke test).
QUICK_STEPS = 600


def full_grid() -> list[tuple[ModelSpec, int]]:
    """Every (model, S) point of the shipped CSV: :data:`TRAINED_S`, then random keys at every S (evaluation only)."""
    points = [(MODELS[label], s) for label, values in TRAINED_S.items() for s in values]
    for label in D_DOT:
        random_keys = ModelSpec(
            f"{label} (random keys)", MODELS[label].feature_map, MODELS[label].params, trained_keys=False
        )
        points += [(random_keys, s) for s in S_VALUES]
    return points


def quick_grid() -> list[tuple[ModelSpec, int]]:
    """A subset for a notebook cell (with :data:`QUICK_STEPS`): ELU+1 (d_dot 16) and DPFP ν=2 (d_dot 64) at S = 8, 24.

    At S = 8 both solve the task; at S = 24 only the larger memory does.
    """
    return [(MODELS[label], s) for label in ("ELU+1", "DPFP ν=2") for s in (8, 24)]


def main(argv: list[str] | None = None) -> int:
    return grid_main(
        "capacity",
        __doc__.split("\n")[0],
        quick_grid=quick_grid,
        full_grid=full_grid,
        quick_steps=QUICK_STEPS,
        d_dot=D_DOT,
        cliff_rows=lambda rows: [r for r in rows if r["keys"] == "trained"],
        argv=argv,
    )
