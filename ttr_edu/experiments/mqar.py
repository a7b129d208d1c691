"""``python -m ttr_edu.experiments mqar``: train small models on MQAR, as Zoology and Based do, and write a CSV.

Zoology (Arora et al. 2023) measures how recall depends on the memory a layer keeps: it trains each layer at
several widths, sweeps the learning rate, keeps the best, and plots accuracy against the width, one panel per task.
Based (Arora et al. 2024) plots recall against the *state size* itself, the floats a layer keeps per sequence, and
finds one frontier: at equal state, layers recall about equally. This grid does the same at CPU scale for the
course's test-time-regression layers (:class:`Cell`: the layer, its feature map, convolution, depth, heads, the
filler, the training recipe, the task ``(T, N)``, the width, the learning rate and the seed).

Two training recipes (:class:`MQARGrid`):

* ``"course"``: fresh batches of ``batch_size`` examples every step (at least 32), Adam at a constant learning rate,
  at most ``max_steps`` steps, an early stop once the loss on a fixed evaluation set is small;
* ``"zoology"`` (:class:`ZoologyRecipe`): Zoology's recipe (``zoology/train.py``): AdamW with weight decay 0.1, a
  cosine decay of the learning rate over the epochs, a fixed training set seen for several epochs in the same
  batches of 256, an early stop once the accuracy on a validation set exceeds 0.99.

Every cell is measured on the same held-out examples of its task and filler (seed ``test_seed``), with Zoology's
vocabulary (8192 tokens), power-law query gaps, and ``T >= 6 N`` (at least half of the query slots hold filler).
Every setting is trained at every learning rate with every seed; :func:`ttr_edu.experiments.mqar_analysis.best`
picks the rate with the best mean over the seeds and reports their spread, as Zoology reports the best rate.

Three grids (``--grid``):

* ``course`` (:data:`COURSE_GRID`, the default): widths where the layers do not yet saturate, a ladder of matched
  state (linear attention and DeltaNet at RLS's state), a second task at the same ``T/N``, softmax attention at widths
  small enough to fail, a zero-filler arm, a Zoology-recipe arm, the convolution ablation with a two-layer attention
  beside it; five seeds where two layers are compared. 528 cells, 4 to 8 CPU hours (``docs/cluster.md``).
  Its CSV is not shipped yet: ``ttr_edu/experiments/results/mqar_grid.csv``, which chapter 09 reads, is the first
  course grid (widths 16, 32, 64 on one task, the learning rate swept on the first seed), read by
  :func:`load_results` through :data:`FIRST_EXPERIMENT`.
* ``zoology`` (:data:`ZOOLOGY_GRID`): Zoology's and Based's tasks, fillers and recipe at a cluster's scale:
  ``docs/cluster.md`` gives its size and cost, and runs it on Slurm.
* ``quick`` (``--quick``): two small cells, a smoke test of the command.

Rows are appended as cells finish, under lines that record the command, the package version, the git commit, the
recipe, the training code, torch, BLAS and the CPU; ``--resume`` refuses a CSV of another recipe or code::

    python -m ttr_edu.experiments mqar --jobs 2                           # the course grid -> mqar_grid.csv
    python -m ttr_edu.experiments mqar --grid zoology --scheduler tcp://HOST:8786 --out mqar_zoology.csv
    python -m ttr_edu.experiments mqar --jobs 2 --resume                  # finish an interrupted run
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from importlib import resources
from pathlib import Path

import torch

from ttr_edu.experiments import plain_help, runner
from ttr_edu.models.mqar import MODELS, MQARModel
from ttr_edu.tasks.mqar import free_slot_fraction, mqar_batch
from ttr_edu.train import train

__all__ = [
    "Block",
    "Cell",
    "ZoologyRecipe",
    "MQARGrid",
    "COURSE_GRID",
    "ZOOLOGY_GRID",
    "QUICK_GRID",
    "GRIDS",
    "LRS",
    "COURSE_TASKS",
    "VARIANTS",
    "EXPERIMENT",
    "build_model",
    "train_cell",
    "cell_cost",
    "run_grid",
    "load_results",
    "load_header",
    "read_grid",
    "FIRST_EXPERIMENT",
    "choose_lr",
    "sweep",
    "Sweep",
    "main",
]

#: the columns that name a cell
KEY = (
    "model",
    "feature_map",
    "short_conv",
    "n_layers",
    "num_heads",
    "filler",
    "training",
    "seq_len",
    "num_pairs",
    "d_model",
    "lr",
    "seed",
)

#: The columns both MQAR grids write after their cell's key (this one and :mod:`.mqar_memories`)
RESULT_FIELDS = (
    "vocab_size",
    "batch_size",
    "test_seed",
    "state_size",
    "steps",
    "final_eval_loss",
    "accuracy",
    "train_seconds",
    "cpu_seconds",
)
#: The types of the result columns both MQAR grids write (this one and :mod:`.mqar_memories`)
RESULT_TYPES = {
    "seq_len": int,
    "num_pairs": int,
    "d_model": int,
    "lr": float,
    "seed": int,
    "vocab_size": int,
    "batch_size": int,
    "test_seed": int,
    "state_size": int,
    "steps": int,
    "final_eval_loss": float,
    "accuracy": float,
    "train_seconds": float,
    "cpu_seconds": float,
}

EXPERIMENT = runner.Experiment(
    name="mqar",
    fields=(*KEY, *RESULT_FIELDS),
    key=KEY,
    types={"short_conv": bool, "n_layers": int, "num_heads": int, **RESULT_TYPES},
    timing=("train_seconds", "cpu_seconds"),
)

#: filler between the queries: uniform random tokens (Zoology's generator default, Based's figure 2) or token 0
#: (Zoology's figure 2, ``random_non_queries=False``)
FILLERS = ("random", "zero")
#: the training recipes a cell can use
TRAININGS = ("course", "zoology")

#: layers that are a registered model with other options: name -> (model, options, label). Based-style linear
#: attention reads ELU+1 features without the L2 norm (Katharopoulos et al. 2020, as in Based's feature-map
#: comparison), where the course's linear attention shares DeltaNet's SiLU + L2-normalised features.
VARIANTS = {
    "linear_attention_elu": ("linear_attention", {"qk_norm": False}, "linear attention (ELU+1, no L2 norm)"),
}


@dataclass(frozen=True)
class Cell:
    """One trained model.

    Attributes:
        model: a name in :data:`ttr_edu.models.mqar.MODELS` or :data:`VARIANTS`.
        feature_map: ``φ`` of a parametric memory (``"silu"``, ``"elu_plus_one"``, ...); ``""`` for attention.
        short_conv: the short convolution on ``q, k, v``; without it the model gets learned absolute positions
            (Zoology's attention has them), and nothing else tells a token which came before it.
        n_layers, num_heads: mixer layers (each with its residual and norm) and heads per layer.
        filler: ``"random"`` or ``"zero"`` (:data:`FILLERS`).
        training: ``"course"`` or ``"zoology"`` (:data:`TRAININGS`).
        seq_len, num_pairs: the task ``(T, N)``.
        d_model, lr, seed: the width, the learning rate, the seed (model initialisation and training batches).
    """

    model: str
    feature_map: str
    short_conv: bool
    n_layers: int
    num_heads: int
    filler: str
    training: str
    seq_len: int
    num_pairs: int
    d_model: int
    lr: float
    seed: int


#: the learning rates the course grid trains every setting with, every seed at every rate. Zoology's figure 2 sweeps
#: np.logspace(-4, -2, 4), Based's np.logspace(-3, -1.5, 4); at this step budget DeltaNet does not train at 1e-3, the
#: sweep's lower edge, where linear attention does: the chapter reports the interaction.
LRS = (1e-3, 3e-3, 1e-2, 3e-2)
#: seeds for a setting the chapter compares (or calls a null); three elsewhere
FIVE_SEEDS, THREE_SEEDS = (0, 1, 2, 3, 4), (0, 1, 2)


@dataclass(frozen=True)
class Block:
    """A product of settings in which one thing varies at a time: models × feature maps × convolution × depths ×
    heads × fillers × recipes × tasks × widths × learning rates × seeds.

    The feature maps apply to the parametric memories; softmax and local linear attention get one cell per remaining
    setting, with feature map ``""``.
    """

    name: str
    models: tuple[str, ...]
    d_models: tuple[int, ...]
    tasks: tuple[tuple[int, int], ...]  # (seq_len, num_pairs)
    feature_maps: tuple[str, ...] = ("silu",)
    short_conv: tuple[bool, ...] = (True,)
    n_layers: tuple[int, ...] = (1,)
    num_heads: tuple[int, ...] = (1,)
    fillers: tuple[str, ...] = ("random",)
    trainings: tuple[str, ...] = ("course",)
    lrs: tuple[float, ...] = LRS
    seeds: tuple[int, ...] = THREE_SEEDS

    def cells(self) -> list[Cell]:
        """Every cell of the block.

        Raises:
            ValueError: an unknown model, filler or training recipe.
        """
        out = []
        for model in self.models:
            if _spec(model) is None:
                valid = ", ".join([*MODELS, *VARIANTS])
                raise ValueError(f"models: unknown name {model!r} in block {self.name!r}; valid: {valid}")
            for name, values, valid in (("fillers", self.fillers, FILLERS), ("trainings", self.trainings, TRAININGS)):
                if not set(values) <= set(valid):
                    raise ValueError(f"{name}: expected values from {valid} in block {self.name!r}, got {values}")
            maps = self.feature_maps if _parametric(model) else ("",)
            out += [
                Cell(model, fm, conv, layers, heads, filler, training, t, n, d, lr, seed)
                for fm in maps
                for conv in self.short_conv
                for layers in self.n_layers
                for heads in self.num_heads
                for filler in self.fillers
                for training in self.trainings
                for t, n in self.tasks
                for d in self.d_models
                for lr in self.lrs
                for seed in self.seeds
            ]
        return out


def _spec(model: str):
    base = VARIANTS[model][0] if model in VARIANTS else model
    return MODELS[base] if base in MODELS else None


def _parametric(model: str) -> bool:
    spec = _spec(model)
    return spec is not None and spec.parametric


def label(model: str) -> str:
    """The name of ``model`` in tables and figures."""
    return VARIANTS[model][2] if model in VARIANTS else MODELS[model].label


@dataclass(frozen=True)
class ZoologyRecipe:
    """Zoology's training recipe (``zoology/train.py`` and ``zoology/config.py`` at the pinned commit): AdamW with
    ``weight_decay``, ``CosineAnnealingLR`` over the epochs (stepped once per epoch, to 0), a fixed training set of
    ``train_examples`` (drawn once, with ``data_seed``, the same for every cell, as Zoology's data seed is) seen
    ``epochs`` times in the same batches of ``batch_size``, in the same order (Zoology's loader does not shuffle),
    and an early stop once the accuracy on a validation set (``data_seed + 1``) exceeds ``stop_accuracy`` (checked
    after each epoch; Zoology checks its test set).

    Zoology trains 100,000 examples for 64 epochs (figure 2), Based 20,000 (100,000 for its first task) for 32.
    """

    batch_size: int = 256
    train_examples: int = 16_384
    epochs: int = 4
    weight_decay: float = 0.1
    stop_accuracy: float = 0.99
    data_seed: int = 123

    def __post_init__(self):
        if self.batch_size < 32 or self.train_examples < self.batch_size or self.epochs < 1:
            raise ValueError(
                f"zoology: expected batch_size >= 32, train_examples >= batch_size and epochs >= 1, got {self}"
            )

    @property
    def max_steps(self) -> int:
        """Optimiser steps without an early stop: ``epochs`` passes of ``ceil(train_examples / batch_size)``."""
        return self.epochs * math.ceil(self.train_examples / self.batch_size)


@dataclass(frozen=True)
class MQARGrid:
    """The blocks and the training recipes every cell shares.

    Attributes:
        name: ``"course"``, ``"zoology"`` or ``"quick"``; part of the recipe, so that rows of two grids never mix.
        blocks: the :class:`Block` s; a cell in two blocks is trained once.
        vocab_size: ``V`` (Zoology: 8192); keys come from ``V/2`` tokens, values from the other half.
        batch_size, max_steps, target_loss, eval_every: the course recipe: Adam on fresh batches of ``batch_size``,
            stopped once the loss on a fixed evaluation set (two batches) is ``<= target_loss`` (checked every
            ``eval_every`` steps), at most ``max_steps`` steps.
        zoology: the Zoology recipe (:class:`ZoologyRecipe`), for cells with ``training="zoology"``.
        eval_examples, test_seed: the held-out examples the accuracy is measured on, one set per task and filler,
            the same for every layer, width, recipe and seed.
        sweep_on_first_seed: sweep the learning rates with the first seed only, then train the other seeds at the
            best rate (:func:`sweep`); ``False`` (the default) trains every rate with every seed.

    Raises:
        ValueError: a task with ``T < 6 N`` (fewer than half of the query slots left to filler), or a batch of
            fewer than 32 examples.
    """

    name: str
    blocks: tuple[Block, ...]
    vocab_size: int = 8192
    batch_size: int = 32
    max_steps: int = 1200
    target_loss: float = 0.02
    eval_every: int = 100
    zoology: ZoologyRecipe = field(default_factory=ZoologyRecipe)
    eval_examples: int = 512
    test_seed: int = 12_345
    sweep_on_first_seed: bool = False

    def __post_init__(self):
        for t, n in sorted({(c.seq_len, c.num_pairs) for c in self.cells()}):
            if free_slot_fraction(t, n) < 0.5:
                raise ValueError(
                    f"seq_len: {n} pairs in {t} tokens leave {free_slot_fraction(t, n):.0%} of the query slots free; "
                    f"MQAR needs room between the queries, use seq_len >= 6 * num_pairs = {6 * n}"
                )
        if self.batch_size < 32:
            raise ValueError(f"batch_size: expected at least 32 examples per step, got {self.batch_size}")

    def cells(self) -> list[Cell]:
        """Every cell once, in block order."""
        return list(dict.fromkeys(c for block in self.blocks for c in block.cells()))

    def recipe(self) -> dict:
        """The shared settings (everything but the blocks), as recorded in the CSV's header and hashed into rows."""
        return {k: v for k, v in asdict(self).items() if k != "blocks"}


# ---------------------------------------------------------------------------------------------------------------------
# The grids
# ---------------------------------------------------------------------------------------------------------------------

#: the course grid's two tasks, at the same T/N = 8 (Zoology's figure 2 uses T = 16 N; Based trains on T = 8 N too)
COURSE_TASKS = ((64, 8), (128, 16))
_A, _B = COURSE_TASKS[:1], COURSE_TASKS[1:]
_MEMORIES = ("linear_attention", "deltanet")
COURSE_GRID = MQARGrid(
    name="course",
    blocks=(
        # accuracy against state (Based's axis) at widths where the curves are not yet saturated. RLS keeps 2 d²
        # floats, the others d²: RLS at d = 11, 16, 32 sits beside linear attention and DeltaNet at d = 16, 23, 45
        # (242, 512, 2048 floats against 256, 529, 2025): the matched-state ladder. Five seeds where the chapter
        # compares two layers at one width or one state
        Block("state", _MEMORIES, (16,), _A, seeds=FIVE_SEEDS),
        Block("state", ("rls",), (11, 16), _A, seeds=FIVE_SEEDS),
        Block("state", _MEMORIES, (8, 12, 23, 32, 45), _A),
        Block("state", ("rls",), (8, 23, 32), _A),
        # softmax attention keeps 2 T d floats: at widths this small it has the linear memories' state
        Block("state", ("softmax_attention",), (6, 7, 8, 16), _A),
        # a second task at the same T/N, twice as many pairs: softmax at d = 8 keeps 2048 floats, as RLS at d = 32
        # and linear attention and DeltaNet at d = 45 do
        Block("second task", _MEMORIES, (16, 32, 45), _B),
        Block("second task", ("rls",), (16, 32), _B),
        Block("second task", ("softmax_attention",), (6, 7, 8), _B),
        # Zoology's figure-2 filler
        Block("zero filler", _MEMORIES, (16,), _A, fillers=("zero",), seeds=FIVE_SEEDS),
        # Zoology's recipe on the d = 16 column
        Block("zoology recipe", (*_MEMORIES, "rls"), (16,), _A, trainings=("zoology",)),
        # the short convolution: one layer without it, and a two-layer softmax attention without it (Zoology's
        # attention solves MQAR with two layers and learned positions, no convolution)
        Block("no convolution", ("deltanet", "softmax_attention"), (16,), _A, short_conv=(False,)),
        Block("no convolution", ("softmax_attention",), (16,), _A, short_conv=(False,), n_layers=(2,)),
    ),
)

#: Zoology's figure-2 tasks (T = 16 N) and Based's harder ones (Based trains on (256, 32) and (256, 64); (256, 64)
#: leaves no query slot to filler, so (512, 64), at T = 8 N, stands in for it)
ZOOLOGY_TASKS = ((64, 4), (128, 8), (256, 16), (256, 32), (512, 64))
#: a √2 ladder of widths: one-head states d² from 256 to 65,536 floats, RLS and Mesa (2 d²) between the rungs
LADDER = (16, 23, 32, 45, 64, 91, 128, 181, 256)
#: Zoology's and Based's learning rates together: 1e-4 to 3e-2
ZOOLOGY_LRS = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
_PARAMETRIC = ("linear_attention", "deltanet", "gated_deltanet", "rls", "mesa")
_ZOOLOGY = dict(trainings=("zoology",), lrs=ZOOLOGY_LRS)
ZOOLOGY_GRID = MQARGrid(
    name="zoology",
    blocks=(
        Block("state", _PARAMETRIC, LADDER, ZOOLOGY_TASKS, **_ZOOLOGY),
        Block("state", ("linear_attention_elu",), LADDER, ZOOLOGY_TASKS, feature_maps=("elu_plus_one",), **_ZOOLOGY),
        # softmax's 2 T d floats cross the ladder's d² on every task
        Block("state", ("softmax_attention",), (16, 32, 64, 128), ZOOLOGY_TASKS, **_ZOOLOGY),
        Block(
            "zero filler",
            ("linear_attention", "deltanet", "rls", "softmax_attention"),
            (16, 32, 64, 128),
            ZOOLOGY_TASKS[:3],
            fillers=("zero",),
            **_ZOOLOGY,
        ),
        Block(
            "two layers",
            ("linear_attention", "softmax_attention"),
            (32, 64, 128),
            ZOOLOGY_TASKS,
            n_layers=(2,),
            **_ZOOLOGY,
        ),
        Block(
            "two layers",
            ("linear_attention_elu",),
            (32, 64, 128),
            ZOOLOGY_TASKS,
            n_layers=(2,),
            feature_maps=("elu_plus_one",),
            **_ZOOLOGY,
        ),
        Block(
            "two layers",
            ("softmax_attention",),
            (32, 64, 128),
            ZOOLOGY_TASKS,
            n_layers=(2,),
            short_conv=(False,),
            **_ZOOLOGY,
        ),
        Block("two heads", ("linear_attention", "deltanet"), (64, 128), ZOOLOGY_TASKS, num_heads=(2,), **_ZOOLOGY),
    ),
    zoology=ZoologyRecipe(batch_size=256, train_examples=20_000, epochs=32),
    eval_examples=1000,
)
#: a smoke test of the command (two small cells): DeltaNet with and without its short convolution
QUICK_GRID = MQARGrid(
    name="quick",
    blocks=(Block("quick", ("deltanet",), (32,), ((32, 4),), short_conv=(True, False), lrs=(3e-3,), seeds=(0,)),),
    max_steps=300,
    eval_every=50,
    eval_examples=256,
)
GRIDS = {"course": COURSE_GRID, "zoology": ZOOLOGY_GRID, "quick": QUICK_GRID}


def choose_lr(rows: list[dict]) -> float:
    """The learning rate of ``rows`` (one setting: every rate, the seeds common to all rates) whose mean accuracy
    over those seeds is highest; ties go to the lower mean final evaluation loss (a diverged run's NaN counts as
    infinite), then to the smaller rate.

    Raises:
        ValueError: no rows.
    """
    if not rows:
        raise ValueError("rows: no rows to choose a learning rate from")
    rates = sorted({r["lr"] for r in rows})
    common = set.intersection(*({r["seed"] for r in rows if r["lr"] == lr} for lr in rates))
    if not common:
        raise ValueError(f"rows: no seed was trained at every learning rate {rates}")

    def score(lr):  # a diverged run (loss NaN) counts as an infinite loss, so it never wins a tie
        picked = [r for r in rows if r["lr"] == lr and r["seed"] in common]
        losses = [math.inf if math.isnan(r["final_eval_loss"]) else r["final_eval_loss"] for r in picked]
        return (sum(r["accuracy"] for r in picked) / len(picked), -sum(losses) / len(picked), -lr)

    return max(rates, key=score)


def sweep(cells: list[dict], *, first_seed_only: bool = True, setting_of=None):
    """The cells to run, as :func:`ttr_edu.experiments.runner.run` takes them.

    ``cells`` is the full product (every learning rate with every seed). With ``first_seed_only`` the runner gets a
    :class:`Sweep` of the rows done so far: first every rate with each setting's first seed, then, once a setting's
    rates are all done, its other seeds at the rate :func:`choose_lr` picks. ``setting_of(cell)`` names a setting
    (default: everything but ``lr`` and ``seed``).
    """
    return Sweep(cells, setting_of) if first_seed_only else cells


class Sweep:
    """A learning-rate sweep on each setting's first seed, then its other seeds at the best rate (see :func:`sweep`).

    Called with the rows done so far, it lists the cells to run now; :meth:`remaining` counts every cell still to
    run, the later seeds included, before their rate is known."""

    def __init__(self, cells: list[dict], setting_of=None) -> None:
        self.setting_of = setting_of or (lambda c: tuple((k, v) for k, v in c.items() if k not in ("lr", "seed")))
        self.keys = tuple(cells[0]) if cells else ()
        self.settings: dict[tuple, list[dict]] = {}
        for cell in cells:
            self.settings.setdefault(self.setting_of(cell), []).append(cell)
        self.first = {key: min(c["seed"] for c in group) for key, group in self.settings.items()}

    def _plan(self, rows: list[dict]) -> list[tuple[list[dict], list[dict] | None]]:
        """Per setting: its first-seed cells, and its other seeds' cells at the chosen rate (``None``: not yet)."""
        by_setting: dict[tuple, list[dict]] = {}
        for row in rows:
            by_setting.setdefault(self.setting_of({k: row[k] for k in self.keys}), []).append(row)
        plan = []
        for key, group in self.settings.items():
            first = [c for c in group if c["seed"] == self.first[key]]
            swept = [r for r in by_setting.get(key, []) if r["seed"] == self.first[key]]
            later = None
            if len({r["lr"] for r in swept}) == len({c["lr"] for c in group}):
                lr = choose_lr(swept)
                later = [c for c in group if c["lr"] == lr and c["seed"] != self.first[key]]
            plan.append((first, later))
        return plan

    def __call__(self, rows: list[dict]) -> list[dict]:
        return [cell for first, later in self._plan(rows) for cell in first + (later or [])]

    def remaining(self, rows: list[dict]) -> int:
        """How many cells are still to run, given the rows done: the missing first-seed cells, and for each setting
        its other seeds (at the chosen rate once known) not yet done."""
        done = {tuple(row[k] for k in self.keys) for row in rows}
        count = 0
        for (key, group), (first, later) in zip(self.settings.items(), self._plan(rows)):
            count += sum(tuple(c[k] for k in self.keys) not in done for c in first)
            if later is None:
                count += len({c["seed"] for c in group} - {self.first[key]})
            else:
                count += sum(tuple(c[k] for k in self.keys) not in done for c in later)
        return count


# ---------------------------------------------------------------------------------------------------------------------
# Training one cell
# ---------------------------------------------------------------------------------------------------------------------


def examples(grid: MQARGrid, cell: Cell, size: int, generator: torch.Generator):
    """``size`` MQAR examples of ``cell``'s task and filler, drawn with ``generator``."""
    random = cell.filler == "random"
    return mqar_batch(
        size, cell.seq_len, cell.num_pairs, grid.vocab_size, random_non_queries=random, generator=generator
    )


def held_out(grid: MQARGrid, cell: Cell):
    """The held-out examples of ``cell``'s task and filler, the same for every layer, width, recipe and seed
    (``grid.test_seed``)."""
    return examples(grid, cell, grid.eval_examples, torch.Generator().manual_seed(grid.test_seed))


def build_model(grid: MQARGrid, cell: Cell) -> MQARModel:
    """The model of ``cell``: its layer (or the registered layer a :data:`VARIANTS` name stands for), ``n_layers``
    of it, ``num_heads`` heads each; without the short convolution it gets learned absolute positions instead, as
    Zoology's attention has them.

    Raises:
        ValueError: an unknown model, or a feature map the layer refuses.
    """
    name, options = (VARIANTS[cell.model][0], VARIANTS[cell.model][1]) if cell.model in VARIANTS else (cell.model, {})
    return MQARModel(
        name,
        grid.vocab_size,
        cell.d_model,
        cell.num_heads,
        feature_map=cell.feature_map or None,
        use_short_conv=cell.short_conv,
        n_layers=cell.n_layers,
        max_positions=0 if cell.short_conv else cell.seq_len,
        **options,
    )


def train_or_diverge(model, sample, test, **train_options) -> tuple[int, float, float]:
    """Train ``model`` with :func:`ttr_edu.train.train` and return ``(steps, final_eval_loss, accuracy on test)``.

    A run that diverges (a NaN or infinite loss, or an activation that overflows: both raise ``FloatingPointError``)
    is a result of its learning rate, not an error of the grid: it is kept as a row with ``steps = 0``,
    ``final_eval_loss = nan`` and ``accuracy = 0.0`` (it recalls nothing), so the sweep moves on to the other rates.
    """
    try:
        result = train(model, sample, **train_options)
    except FloatingPointError:
        return 0, math.nan, 0.0
    return result.steps, result.final_eval_loss, model.accuracy(test)


def train_zoology(
    model: MQARModel, train_set, validation, recipe: ZoologyRecipe, lr: float, seed: int
) -> tuple[int, float]:
    """Train ``model`` with Zoology's recipe (:class:`ZoologyRecipe`); return ``(steps, loss on validation)``.

    Each epoch visits ``train_set`` in the same batches, in the same order (Zoology's data loader neither shuffles
    the batches nor their examples; its last batch may be smaller); after each epoch the accuracy on ``validation``
    decides the early stop, then the cosine schedule steps. ``seed`` seeds the model's own random draws.

    Raises:
        FloatingPointError: the training loss became NaN or infinite (a diverging run).
    """
    from ttr_edu.tasks.mqar import MQARBatch

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=recipe.weight_decay)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=recipe.epochs, eta_min=0.0)
    size, steps = train_set.inputs.shape[0], 0
    batches = [
        MQARBatch(
            train_set.inputs[i : i + recipe.batch_size],
            train_set.labels[i : i + recipe.batch_size],
            train_set.num_pairs,
            train_set.vocab_size,
        )
        for i in range(0, size, recipe.batch_size)
    ]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model.train()
        for _ in range(recipe.epochs):
            for batch in batches:
                loss = model.loss(batch)
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"the training loss became {loss.item()} at step {steps}")
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                steps += 1
            if model.accuracy(validation) > recipe.stop_accuracy:
                break
            schedule.step()
    with torch.no_grad():
        model.eval()
        return steps, float(model.loss(validation))


def train_cell(grid: MQARGrid, cell: Cell | dict, *, progress: bool | None = False) -> dict:
    """Train one model of the grid with its recipe and return its CSV row (a dict keyed by ``EXPERIMENT.fields``).

    Runs on one thread (the matrices are tiny; extra threads only fight over a shared CPU) and restores the caller's
    thread count. The same cell gives the same row on the same machine, but for its two times.

    Raises:
        ValueError: an unknown model, or a feature map the model refuses.
    """
    cell = Cell(**cell) if isinstance(cell, dict) else cell
    g, z = grid, grid.zoology
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        test = held_out(g, cell)
        torch.manual_seed(cell.seed)
        model = build_model(g, cell)
        start, cpu_start = time.perf_counter(), time.process_time()
        if cell.training == "course":
            steps, final_eval_loss, accuracy = train_or_diverge(
                model,
                partial(examples, g, cell, g.batch_size),
                test,
                max_steps=g.max_steps,
                lr=cell.lr,
                target_loss=g.target_loss,
                eval_every=g.eval_every,
                eval_batches=2,
                seed=cell.seed,
                progress=progress,
                desc=f"{cell.model} {cell.feature_map} d={cell.d_model} lr={cell.lr:g}",
            )
        else:
            train_set = examples(g, cell, z.train_examples, torch.Generator().manual_seed(z.data_seed))
            validation = examples(g, cell, g.eval_examples, torch.Generator().manual_seed(z.data_seed + 1))
            try:
                steps, final_eval_loss = train_zoology(model, train_set, validation, z, cell.lr, cell.seed)
                accuracy = model.accuracy(test)
            except FloatingPointError:
                steps, final_eval_loss, accuracy = 0, math.nan, 0.0
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    finally:
        torch.set_num_threads(threads)
    return {
        **asdict(cell),
        "vocab_size": g.vocab_size,
        "batch_size": g.batch_size if cell.training == "course" else z.batch_size,
        "test_seed": g.test_seed,
        "state_size": model.state_size(cell.seq_len),
        "steps": steps,
        "final_eval_loss": final_eval_loss,
        "accuracy": accuracy,
        "train_seconds": round(seconds, 2),
        "cpu_seconds": round(cpu_seconds, 2),
    }


def cell_cost(grid: MQARGrid, cell: Cell) -> float:
    """A cell's largest cost in token-widths, to rank cells by size: the most optimiser steps its recipe allows
    (an early stop only shortens it) × examples per step × tokens per example × width × layers."""
    steps, batch = (
        (grid.max_steps, grid.batch_size)
        if cell.training == "course"
        else (grid.zoology.max_steps, grid.zoology.batch_size)
    )
    return steps * batch * cell.seq_len * cell.d_model * cell.n_layers


def smallest(grid: MQARGrid, count: int) -> list[Cell]:
    """Whole settings (every rate and seed) of ``grid``, cheapest first (:func:`cell_cost`), until at least
    ``count`` cells: a first run that proves a cluster set-up, whose rows a later ``--resume`` keeps."""
    settings: dict[tuple, list[Cell]] = {}
    for cell in grid.cells():
        settings.setdefault(tuple(v for k, v in asdict(cell).items() if k not in ("lr", "seed")), []).append(cell)
    picked: list[Cell] = []
    for group in sorted(settings.values(), key=lambda group: cell_cost(grid, group[0])):
        if len(picked) >= count:
            break
        picked += group
    return picked


def run_grid(
    grid: MQARGrid = COURSE_GRID,
    out: str | Path | None = None,
    *,
    resume: bool = False,
    jobs: int = 1,
    scheduler: str | None = None,
    command: str | None = None,
    progress: bool | None = None,
    cells: list[Cell] | None = None,
) -> list[dict]:
    """Train every cell of ``grid`` (or ``cells`` of it) through :func:`ttr_edu.experiments.runner.run`; return the
    rows in cell order.

    Args:
        out: the CSV (rows appended as cells finish); ``None`` keeps them in memory.
        resume: keep the rows already in ``out`` (only if written with this grid's recipe) and train the rest.
        jobs: local worker processes (joblib), one thread each. scheduler: ``"local:N"`` or a Dask address.
        command: recorded in the CSV's header (default: this process's command line).

    Raises:
        ttr_edu.experiments.runner.ResumeRefused: ``resume`` on a CSV of another recipe (the difference named).
    """
    result = runner.run(
        EXPERIMENT,
        grid.recipe(),
        sweep(
            [asdict(c) for c in (grid.cells() if cells is None else cells)], first_seed_only=grid.sweep_on_first_seed
        ),
        partial(train_cell, grid),
        out,
        resume=resume,
        jobs=jobs,
        scheduler=scheduler,
        command=command,
        progress=progress,
    )
    return result.rows


#: The first course grid's columns (before a cell named its depth, heads, filler and training recipe). Its rows
#: are one-layer, one-head models trained with the course recipe on the filler its recipe line names.
FIRST_EXPERIMENT = runner.Experiment(
    name="mqar",
    fields=(*(k for k in KEY if k not in ("n_layers", "num_heads", "filler", "training")), *RESULT_FIELDS),
    key=tuple(k for k in KEY if k not in ("n_layers", "num_heads", "filler", "training")),
    types={"short_conv": bool, **RESULT_TYPES},
    timing=("train_seconds", "cpu_seconds"),
)


def read_grid(text: str, name: str | Path) -> tuple[dict, list[dict]]:
    """The provenance lines and typed rows of a grid CSV's ``text`` (from the file ``name``), in either layout:
    this module's, or the first course grid's (:data:`FIRST_EXPERIMENT`), whose rows get the cell columns it did not
    have from what its recipe fixed: one layer, one head, the course recipe, and the filler of its
    ``random_non_queries``.

    Raises:
        ValueError: not a CSV of the MQAR grid in either layout, or a row that does not parse (file and line named).
    """
    try:
        return runner.read(EXPERIMENT, name, text=text)
    except ValueError as error:
        try:
            meta, rows = runner.read(FIRST_EXPERIMENT, name, text=text)
        except ValueError:
            raise error from None
    filler = "random" if meta.get("recipe", {}).get("random_non_queries", True) else "zero"
    fixed = {"n_layers": 1, "num_heads": 1, "filler": filler, "training": "course"}
    return meta, [{k: {**fixed, **r}[k] for k in EXPERIMENT.columns} for r in rows]


def load_header(path: str | Path | None = None, *, shipped: str = "mqar_grid.csv") -> dict:
    """The provenance lines of a grid CSV (default: the shipped course grid), as :func:`load_results` reads it:
    ``recipe`` parsed from JSON, ``command``, ``git commit``, ..."""
    return read_grid(_grid_text(path, shipped), path or shipped)[0]


def _grid_text(path: str | Path | None, shipped: str) -> str:
    if path is None:
        return resources.files("ttr_edu.experiments").joinpath("results", shipped).read_text()
    return Path(path).read_text()


def load_results(path: str | Path | None = None, *, show: bool = True, shipped: str = "mqar_grid.csv") -> list[dict]:
    """Read a grid CSV (default: the course grid shipped as ``ttr_edu/experiments/results/mqar_grid.csv``) as typed
    dicts, in this module's layout or the first course grid's (:func:`read_grid`).

    Args:
        show: print the provenance lines (command, version, git commit, recipe, platform) recorded in the file.
        shipped: the name of a CSV in ``ttr_edu/experiments/results`` to read when ``path`` is ``None``.
    """
    text = _grid_text(path, shipped)
    _, rows = read_grid(text, path or shipped)
    if show:
        shown = [
            line[2:] for line in text.splitlines() if line.startswith("# ") and not line.startswith("# training code")
        ]
        print("\n".join(shown))
    return rows


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m ttr_edu.experiments mqar [--grid course|zoology | --quick] [--smallest N]
    [--out PATH] [--jobs N | --scheduler ADDRESS] [--resume] [--max-steps N]``; returns the exit status."""
    return _main(argv)


@runner.guarded
def _main(argv: list[str] | None = None) -> int:
    parser = runner.ArgumentParser(
        prog="python -m ttr_edu.experiments mqar",
        description=plain_help(__doc__),
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter,
    )
    parser.add_argument("--grid", choices=("course", "zoology"), default="course", help="which grid (default: course)")
    parser.add_argument("--quick", action="store_true", help="two small cells only: a smoke test of the command")
    parser.add_argument(
        "--smallest",
        type=int,
        default=None,
        metavar="N",
        help="only the cheapest settings of the grid, whole, until at least N cells (a first run on a new cluster; "
        "--resume without it adds the rest)",
    )
    parser.add_argument("--max-steps", type=int, default=None, help="override the grid's max_steps (a new recipe)")
    runner.add_arguments(parser, "mqar_grid.csv")
    args = parser.parse_args(argv)
    options = runner.runner_options(parser, args)
    for name in ("max_steps", "smallest"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: expected a positive int, got {getattr(args, name)}")
    grid = QUICK_GRID if args.quick else GRIDS[args.grid]
    if args.max_steps is not None:
        grid = replace(grid, max_steps=args.max_steps)
    cells = grid.cells() if args.smallest is None else smallest(grid, args.smallest)
    result = runner.run(
        EXPERIMENT,
        grid.recipe(),
        sweep([asdict(c) for c in cells], first_seed_only=grid.sweep_on_first_seed),
        partial(train_cell, grid),
        command=runner.command_line("mqar", argv),
        **options,
    )
    print(
        f"{result.trained} cells trained in {result.wall_seconds:.0f} s wall, {result.cpu_seconds:.0f} s CPU summed "
        f"over cells; {len(result.rows)} rows in {options['out']}"
    )
    return runner.report_lost(result, EXPERIMENT)


if __name__ == "__main__":
    raise SystemExit(main())
