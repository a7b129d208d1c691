"""Setting 2 of Schlag, Irie and Schmidhuber (2021, §6.1, Figure 3): overwriting associations.

Keys are drawn with replacement from ``S`` symbols over a sequence of length ``2 S`` and the query asks for the
latest value of a key. The sum rule can only add, so an old value keeps interfering: it fails already at small
``S``. The delta rule replaces the value stored under a key and solves the task up to about ``d_dot`` keys.
With ``d_k = 16``: DPFP ν = 1 (``d_dot = 32``) for both rules, and DPFP ν = 2 (``d_dot = 64``) for the delta rule
to show its limit move with ``d_dot``.

Run the full grid (writes CSV, shows progress bars)::

    python -m ttr_edu.experiments overwrite --out overwrite_grid.csv

The shipped ``results/overwrite_grid.csv`` holds :data:`SEEDS` (the ``train_seed`` column): every point for seed 0,
and for seeds 1 and 2 every sum-rule point and the delta-rule points up to just past each limit; each seed is one
``--seed`` run, concatenated.

The paper's scale is ``d_k = 64`` (DPFP ν = 1, ``d_dot = 128``), ``S`` up to 200; ours is ``d_k = 16``, ``S`` up
to 64, Adam 1e-2 for at most 3000 steps, so the grid fits in about 20 minutes on two CPU cores.
"""

from __future__ import annotations

from ttr_edu.experiments.grid import ModelSpec, grid_main

__all__ = ["QUICK_STEPS", "MODELS", "D_DOT", "SEEDS", "full_grid", "quick_grid", "main"]

MODELS = {
    "sum, DPFP ν=1": ModelSpec("sum, DPFP ν=1", "dpfp", (("nu", 1),), update_rule="sum"),
    "delta, DPFP ν=1": ModelSpec("delta, DPFP ν=1", "dpfp", (("nu", 1),), update_rule="delta"),
    "delta, DPFP ν=2": ModelSpec("delta, DPFP ν=2", "dpfp", (("nu", 2),), update_rule="delta"),
}
D_DOT = {"sum, DPFP ν=1": 32, "delta, DPFP ν=1": 32, "delta, DPFP ν=2": 64}
S_VALUES = {
    "sum, DPFP ν=1": (4, 8, 16, 24, 32, 48),
    "delta, DPFP ν=1": (4, 8, 12, 16, 18, 20, 24, 32, 40, 48),
    "delta, DPFP ν=2": (16, 32, 48, 56, 64),
}


#: The training seeds of the shipped CSV (chapter 04's claims hold in each).
SEEDS = (0, 1, 2)

#: Step budget of the quick subset (a notebook cell or a smoke test).
QUICK_STEPS = 600


def full_grid() -> list[tuple[ModelSpec, int]]:
    """Every (model, S) point of the shipped CSV."""
    return [(MODELS[label], s) for label, values in S_VALUES.items() for s in values]


def quick_grid() -> list[tuple[ModelSpec, int]]:
    """A subset for a notebook cell (with :data:`QUICK_STEPS`): both rules with DPFP ν=1 at S = 8."""
    return [(MODELS["sum, DPFP ν=1"], 8), (MODELS["delta, DPFP ν=1"], 8)]


def main(argv: list[str] | None = None) -> int:
    return grid_main(
        "overwrite",
        __doc__.split("\n")[0],
        quick_grid=quick_grid,
        full_grid=full_grid,
        quick_steps=QUICK_STEPS,
        d_dot=D_DOT,
        argv=argv,
    )
