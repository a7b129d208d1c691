"""``python -m ttr_edu.experiments mqar``: train one-layer models on MQAR, Zoology's way, and write a CSV.

Zoology (Arora et al. 2023) measures how recall depends on the *state* a layer keeps: it trains each layer at
several widths, sweeps the learning rate, keeps the best, and plots accuracy against the width (its follow-up, Based,
against the state size itself). This grid does the same at CPU scale, for the course's test-time-regression layers.
Every cell shares one recipe (:class:`MQARGrid`):

* the task of :func:`ttr_edu.tasks.mqar.mqar_batch` with Zoology's vocabulary (8192 tokens), power-law query gaps
  and random filler, at ``T >= 6 N`` (at least half of the query slots hold filler);
* batches of ``batch_size`` fresh examples at every ``N`` (at least 32), Adam at a constant learning rate, an early
  stop once the evaluation loss is small, and the accuracy on one held-out set per ``(T, N)`` (seed ``test_seed``);
* a sweep over ``lrs`` and ``seeds`` for every setting: :func:`best` picks the learning rate with the best mean over
  the seeds and reports the spread of the seeds there (min–max), as Zoology reports the best learning rate.

The grid is a union of :class:`Block` s, each a product in which one thing varies at a time:

* ``widths``: linear attention, DeltaNet, RLS and softmax attention at three widths (Zoology's figure: accuracy
  against state size, one line per layer); the linear memories share the feature map ``silu`` (the convolution's
  SiLU, then the L2 norm: DeltaNet's own choice) and RLS keeps its true state, twice DeltaNet's;
* ``features``: the same three linear memories with ``φ = ELU+1`` (non-negative keys) at the middle width;
* ``no_conv``: DeltaNet and softmax attention without the short convolution, at the smallest width;
* ``stacked``: linear attention and DeltaNet with ELU+1 stacked on the convolution's SiLU (keys that start almost
  collinear), at the middle width;
* (the full grid only) ``gated``: gated DeltaNet and Mesa (gated RLS) beside the others at every width.

Two sizes of the same grid: ``--grid course`` (the default; :data:`COURSE_GRID`, the learning rates swept on the
first seed; 95 cells, sized to finish within 30 minutes on two cores with ``--jobs 2``: each row records its CPU and
wall seconds, and the CSV's comment lines when the run started and finished. The CSV is shipped as
``ttr_edu/experiments/results/mqar_grid.csv`` and read by chapter 09) and ``--grid full`` (:data:`FULL_GRID`,
Zoology's scale: widths up to 128, sequences up to 256 tokens; a cluster's job, see
``docs/cluster.md``). ``--quick`` runs two small cells, a smoke test of the command (a minute or so).

Rows are appended as cells finish, under lines that record the command, the package version, the git commit and the
recipe; every row carries the recipe's hash and the version, and ``--resume`` refuses a CSV of another recipe::

    python -m ttr_edu.experiments mqar --jobs 2                           # the course grid -> mqar_grid.csv
    python -m ttr_edu.experiments mqar --grid full --scheduler tcp://HOST:8786 --out mqar_full.csv
    python -m ttr_edu.experiments mqar --jobs 2 --resume                  # finish an interrupted run
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace
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
    "MQARGrid",
    "COURSE_GRID",
    "FULL_GRID",
    "QUICK_GRID",
    "GRIDS",
    "EXPERIMENT",
    "train_cell",
    "run_grid",
    "load_results",
    "summarise",
    "best",
    "choose_lr",
    "sweep",
    "settings",
    "table",
    "state_figure",
    "ablation_figure",
    "STYLE",
    "main",
]

#: the columns that name a cell
KEY = ("model", "feature_map", "short_conv", "seq_len", "num_pairs", "d_model", "lr", "seed")

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
    types={"short_conv": bool, **RESULT_TYPES},
    timing=("train_seconds", "cpu_seconds"),
)


@dataclass(frozen=True)
class Cell:
    """One trained model: the layer, its feature map (``""`` for the key-value-cache layers), the convolution, the
    task ``(T, N)``, the width, the learning rate and the seed (model initialisation and training batches)."""

    model: str
    feature_map: str
    short_conv: bool
    seq_len: int
    num_pairs: int
    d_model: int
    lr: float
    seed: int


#: the learning rates every setting of the course grid is trained with (Zoology's figure 2 sweeps
#: np.logspace(-4, -2, 4); its DeltaNet configurations go up to 3.2e-2). An earlier course grid swept 1e-3 to 1e-2
#: and its best rate was often the largest; chapter 09 counts the settings whose best rate is at an edge of this one.
LRS = (3e-3, 1e-2, 3e-2)


@dataclass(frozen=True)
class Block:
    """A product of settings: models × feature maps × convolution × tasks × widths × learning rates × seeds.

    The feature maps apply to the linear memories (:data:`ttr_edu.models.mqar.LINEAR_MEMORIES`); softmax and local
    linear attention get one cell per remaining setting, with feature map ``""``.
    """

    name: str
    models: tuple[str, ...]
    d_models: tuple[int, ...]
    tasks: tuple[tuple[int, int], ...]  # (seq_len, num_pairs)
    feature_maps: tuple[str, ...] = ("silu",)
    short_conv: tuple[bool, ...] = (True,)
    lrs: tuple[float, ...] = LRS
    seeds: tuple[int, ...] = (0, 1, 2)

    def cells(self) -> list[Cell]:
        """Every cell of the block.

        Raises:
            ValueError: an unknown model name.
        """
        out = []
        for model in self.models:
            if model not in MODELS:
                raise ValueError(f"models: unknown name {model!r} in block {self.name!r}; valid: {', '.join(MODELS)}")
            maps = self.feature_maps if MODELS[model].parametric else ("",)
            out += [
                Cell(model, fm, conv, t, n, d, lr, seed)
                for fm in maps
                for conv in self.short_conv
                for t, n in self.tasks
                for d in self.d_models
                for lr in self.lrs
                for seed in self.seeds
            ]
        return out


@dataclass(frozen=True)
class MQARGrid:
    """The blocks and the training recipe every cell shares.

    Attributes:
        name: ``"course"``, ``"full"`` or ``"quick"``; part of the recipe, so that rows of two grids never mix.
        blocks: the :class:`Block` s; a cell in two blocks is trained once.
        vocab_size: ``V`` (Zoology: 8192); keys come from ``V/2`` tokens, values from the other half.
        batch_size: examples per training step, the same at every ``N``.
        max_steps, target_loss, eval_every: Adam on fresh batches, stopped once the loss on a fixed evaluation
            set (two batches) is ``<= target_loss`` (checked every ``eval_every`` steps).
        eval_examples, test_seed: the held-out examples the accuracy is measured on, one set per ``(T, N)``, the
            same for every layer, width and seed.
        random_non_queries: filler drawn uniformly from the vocabulary (Zoology's generator default), else token 0.
        sweep_on_first_seed: sweep the learning rates with the first seed only, then train the other seeds at the
            best rate (:func:`sweep`); ``False`` trains every rate with every seed.

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
    eval_examples: int = 512
    test_seed: int = 12_345
    random_non_queries: bool = True
    sweep_on_first_seed: bool = True

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


# The course grid, sized for two cores: one task (T = 64, N = 8; Zoology's T = 16 N at 8 pairs would be 128 tokens),
# three widths, three learning rates swept on the first seed, three seeds at the best rate.
COURSE_TASK = (64, 8)
COURSE_WIDTHS = (16, 32, 64)
COURSE_GRID = MQARGrid(
    name="course",
    blocks=(
        Block("widths", ("linear_attention", "deltanet", "rls", "softmax_attention"), COURSE_WIDTHS, (COURSE_TASK,)),
        Block(
            "features", ("linear_attention", "deltanet", "rls"), (32,), (COURSE_TASK,), feature_maps=("elu_plus_one",)
        ),
        Block("no_conv", ("deltanet", "softmax_attention"), (16,), (COURSE_TASK,), short_conv=(False,)),
        Block(
            "stacked",
            ("linear_attention", "deltanet"),
            (32,),
            (COURSE_TASK,),
            feature_maps=("elu_plus_one_after_silu",),
        ),
    ),
)
#: Zoology's scale (figure 2: T = 16 N at N = 4, 8, 16; widths 64 to 512, here 32 to 128): a cluster's job
FULL_TASKS = ((64, 4), (128, 8), (256, 16))
FULL_LRS = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
FULL_GRID = MQARGrid(
    name="full",
    blocks=(
        Block(
            "widths",
            ("linear_attention", "deltanet", "gated_deltanet", "rls", "mesa", "softmax_attention"),
            (32, 64, 128),
            FULL_TASKS,
            lrs=FULL_LRS,
        ),
        Block(
            "features",
            ("linear_attention", "deltanet", "rls"),
            (32, 64, 128),
            FULL_TASKS,
            feature_maps=("identity", "elu_plus_one"),
            lrs=FULL_LRS,
        ),
        Block(
            "no_conv",
            ("linear_attention", "deltanet", "rls", "softmax_attention"),
            (64,),
            ((128, 8),),
            short_conv=(False,),
            lrs=FULL_LRS,
        ),
    ),
    max_steps=5000,
    eval_examples=1000,
    sweep_on_first_seed=False,
)
#: a smoke test of the command (two small cells): DeltaNet with and without its short convolution
QUICK_GRID = MQARGrid(
    name="quick",
    blocks=(Block("quick", ("deltanet",), (32,), ((32, 4),), short_conv=(True, False), lrs=(3e-3,), seeds=(0,)),),
    max_steps=300,
    eval_every=50,
    eval_examples=256,
)
GRIDS = {"course": COURSE_GRID, "full": FULL_GRID, "quick": QUICK_GRID}


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
    function of the rows done so far: first every rate with each setting's first seed, then, once a setting's rates
    are all done, its other seeds at the rate :func:`choose_lr` picks. ``setting_of(cell)`` names a setting (default:
    everything but ``lr`` and ``seed``).
    """
    if not first_seed_only:
        return cells
    setting_of = setting_of or (lambda c: tuple((k, v) for k, v in c.items() if k not in ("lr", "seed")))
    settings_: dict[tuple, list[dict]] = {}
    for cell in cells:
        settings_.setdefault(setting_of(cell), []).append(cell)
    first = {key: min(c["seed"] for c in group) for key, group in settings_.items()}

    def cells_for(rows: list[dict]) -> list[dict]:
        by_setting: dict[tuple, list[dict]] = {}
        for row in rows:
            by_setting.setdefault(setting_of({k: row[k] for k in cells[0]}), []).append(row)
        out = []
        for key, group in settings_.items():
            out += [c for c in group if c["seed"] == first[key]]
            swept = [r for r in by_setting.get(key, []) if r["seed"] == first[key]]
            if len({r["lr"] for r in swept}) == len({c["lr"] for c in group}):
                lr = choose_lr(swept)
                out += [c for c in group if c["lr"] == lr and c["seed"] != first[key]]
        return out

    return cells_for


def held_out(grid: MQARGrid, seq_len: int, num_pairs: int):
    """The held-out examples of one task, the same for every layer, width and seed (``grid.test_seed``)."""
    return mqar_batch(
        grid.eval_examples,
        seq_len,
        num_pairs,
        grid.vocab_size,
        random_non_queries=grid.random_non_queries,
        generator=torch.Generator().manual_seed(grid.test_seed),
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


def train_cell(grid: MQARGrid, cell: Cell | dict, *, progress: bool | None = False) -> dict:
    """Train one model of the grid and return its CSV row (a dict keyed by ``EXPERIMENT.fields``).

    Runs on one thread (the matrices are tiny; extra threads only fight over a shared CPU) and restores the caller's
    thread count. The same cell gives the same row everywhere, but for its two times.

    Raises:
        ValueError: an unknown model, or a feature map the model refuses.
    """
    cell = Cell(**cell) if isinstance(cell, dict) else cell
    g = grid

    def sample(generator: torch.Generator):
        return mqar_batch(
            g.batch_size,
            cell.seq_len,
            cell.num_pairs,
            g.vocab_size,
            random_non_queries=g.random_non_queries,
            generator=generator,
        )

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        test = held_out(g, cell.seq_len, cell.num_pairs)
        torch.manual_seed(cell.seed)
        model = MQARModel(
            cell.model,
            g.vocab_size,
            cell.d_model,
            feature_map=cell.feature_map or None,
            use_short_conv=cell.short_conv,
        )
        start, cpu_start = time.perf_counter(), time.process_time()
        steps, final_eval_loss, accuracy = train_or_diverge(
            model,
            sample,
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
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    finally:
        torch.set_num_threads(threads)
    return {
        **asdict(cell),
        "vocab_size": g.vocab_size,
        "batch_size": g.batch_size,
        "test_seed": g.test_seed,
        "state_size": model.state_size(cell.seq_len),
        "steps": steps,
        "final_eval_loss": final_eval_loss,
        "accuracy": accuracy,
        "train_seconds": round(seconds, 2),
        "cpu_seconds": round(cpu_seconds, 2),
    }


def run_grid(
    grid: MQARGrid = COURSE_GRID,
    out: str | Path | None = None,
    *,
    resume: bool = False,
    jobs: int = 1,
    scheduler: str | None = None,
    command: str | None = None,
    progress: bool | None = None,
) -> list[dict]:
    """Train every cell of ``grid`` through :func:`ttr_edu.experiments.runner.run`; return the rows in cell order.

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
        sweep([asdict(c) for c in grid.cells()], first_seed_only=grid.sweep_on_first_seed),
        partial(train_cell, grid),
        out,
        resume=resume,
        jobs=jobs,
        scheduler=scheduler,
        command=command,
        progress=progress,
    )
    return result.rows


def load_results(path: str | Path | None = None, *, show: bool = True, shipped: str = "mqar_grid.csv") -> list[dict]:
    """Read a grid CSV (default: the course grid shipped as ``ttr_edu/experiments/results/mqar_grid.csv``) as typed
    dicts.

    Args:
        show: print the provenance lines (command, version, git commit, recipe) recorded in the file.
    """
    if path is None:
        text = resources.files("ttr_edu.experiments").joinpath("results", shipped).read_text()
        meta, rows = runner.read(EXPERIMENT, shipped, text=text)
    else:
        text = Path(path).read_text()
        meta, rows = runner.read(EXPERIMENT, path)
    if show:
        print("\n".join(line[2:] for line in text.splitlines() if line.startswith("# ")))
    return rows


def summarise(rows: list[dict], **where) -> dict:
    """Mean, min, max and std (population) of the accuracy over the rows matching ``where`` (the seeds of a setting).

    ``summarise(rows, model="deltanet", feature_map="silu", d_model=32, lr=3e-3)``.

    Raises:
        ValueError: no row matches (the message gives the filter).
    """
    accs = [r["accuracy"] for r in rows if all(r[k] == v for k, v in where.items())]
    if not accs:
        raise ValueError(f"where: no row matches {where}")
    mean = sum(accs) / len(accs)
    std = (sum((a - mean) ** 2 for a in accs) / len(accs)) ** 0.5
    return {"mean": mean, "min": min(accs), "max": max(accs), "std": std, "n": len(accs)}


def best(rows: list[dict], **where) -> dict:
    """The best learning rate of one setting and the seeds' spread there (Zoology reports the best learning rate).

    Among the rows matching ``where`` (the learning rates and seeds of one layer, feature map, convolution, task and
    width), the rate is chosen by :func:`choose_lr` on the seeds trained at every rate (the first seed, when the
    grid sweeps on it: :func:`sweep`); the spread is over every seed trained at that rate.

    Returns:
        :func:`summarise` of the chosen rate's seeds, plus ``lr`` (the rate) and ``by_lr`` (accuracy per rate, on
        the seeds common to all rates).

    Raises:
        ValueError: no row matches.
    """
    matching = [r for r in rows if all(r[k] == v for k, v in where.items())]
    if not matching:
        raise ValueError(f"where: no row matches {where}")
    lr = choose_lr(matching)
    rates = sorted({r["lr"] for r in matching})
    common = set.intersection(*({r["seed"] for r in matching if r["lr"] == rate} for rate in rates))
    by_lr = {rate: summarise([r for r in matching if r["seed"] in common], lr=rate)["mean"] for rate in rates}
    return {**summarise(matching, lr=lr), "lr": lr, "by_lr": by_lr}


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m ttr_edu.experiments mqar [--grid course|full | --quick] [--out PATH] [--jobs N |
    --scheduler ADDRESS] [--resume] [--max-steps N]``; returns the exit status."""
    return _main(argv)


@runner.guarded
def _main(argv: list[str] | None = None) -> int:
    parser = runner.ArgumentParser(
        prog="python -m ttr_edu.experiments mqar",
        description=plain_help(__doc__),
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter,
    )
    parser.add_argument("--grid", choices=("course", "full"), default="course", help="which grid (default: course)")
    parser.add_argument("--quick", action="store_true", help="two small cells only: a smoke test of the command")
    parser.add_argument("--max-steps", type=int, default=None, help="override the grid's max_steps (a new recipe)")
    runner.add_arguments(parser, "mqar_grid.csv")
    args = parser.parse_args(argv)
    options = runner.runner_options(parser, args)
    if args.max_steps is not None and args.max_steps < 1:
        parser.error(f"--max-steps: expected a positive int, got {args.max_steps}")
    grid = QUICK_GRID if args.quick else GRIDS[args.grid]
    if args.max_steps is not None:
        grid = replace(grid, max_steps=args.max_steps)
    result = runner.run(
        EXPERIMENT,
        grid.recipe(),
        sweep([asdict(c) for c in grid.cells()], first_seed_only=grid.sweep_on_first_seed),
        partial(train_cell, grid),
        command=runner.command_line("mqar", argv),
        **options,
    )
    print(
        f"{result.trained} cells trained in {result.wall_seconds:.0f} s wall, {result.cpu_seconds:.0f} s CPU summed "
        f"over cells; {len(result.rows)} rows in {options['out']}"
    )
    return runner.report_lost(result, EXPERIMENT)


# --------------------------------------------------------------------------------------------------------------
# Reading the grid: a table and two figures (chapter 09).
# --------------------------------------------------------------------------------------------------------------

#: marker, dash and colour per model, fixed so that a model looks the same in every figure
STYLE = {
    "linear_attention": ("circle", "solid", "#636efa"),
    "deltanet": ("square", "dash", "#ef553b"),
    "gated_deltanet": ("square-open", "dot", "#ff7f0e"),
    "rls": ("diamond", "dashdot", "#00cc96"),
    "mesa": ("diamond-open", "dot", "#2ca02c"),
    "softmax_attention": ("x", "longdash", "#444444"),
    "local_linear_attention": ("cross", "dot", "#19d3f3"),
}
FEATURE_MAP_TITLES = {
    "silu": "φ = SiLU (the convolution's)",
    "identity": "φ = identity (signed keys)",
    "elu_plus_one": "φ = ELU+1 (non-negative keys)",
    "elu_plus_one_after_silu": "φ = ELU+1 after the SiLU (almost collinear keys at the start)",
    "relu": "φ = ReLU (non-negative keys)",
    "": "no feature map",
}


def settings(rows: list[dict]) -> list[tuple]:
    """The distinct ``(model, feature map, short conv, seq_len, num_pairs, d_model)`` settings of ``rows``, in
    :data:`MODELS` order, then by width."""
    order = {name: i for i, name in enumerate(MODELS)}
    found = {(r["model"], r["feature_map"], r["short_conv"], r["seq_len"], r["num_pairs"], r["d_model"]) for r in rows}
    return sorted(
        found, key=lambda s: (not s[2], s[1] not in ("silu", ""), order.get(s[0], 99), s[1], s[3], s[4], s[5])
    )


def table(rows: list[dict]) -> str:
    """One line per setting: the best learning rate and ``mean [min–max]`` of the seeds there, the state in floats."""
    width = max([14, *(len(r["feature_map"]) + 2 for r in rows)])  # the φ column fits the longest name
    head = f"{'layer':<20}{'φ':<{width}}{'conv':<6}{'T':>4}{'N':>4}{'d':>5}{'state':>8}{'best lr':>9}"
    head += "   accuracy [seeds]"
    lines = [head, "-" * len(head)]
    for model, fm, conv, t, n, d in settings(rows):
        where = dict(model=model, feature_map=fm, short_conv=conv, seq_len=t, num_pairs=n, d_model=d)
        b = best(rows, **where)
        state = next(r["state_size"] for r in rows if all(r[k] == v for k, v in where.items()))
        lines.append(
            f"{model:<20}{fm or '—':<{width}}{'yes' if conv else 'no':<6}{t:>4}{n:>4}{d:>5}{state:>8}{b['lr']:>9.0e}   "
            f"{b['mean']:.2f} [{b['min']:.2f}–{b['max']:.2f}]"
        )
    return "\n".join(lines)


def state_figure(
    rows: list[dict],
    models=("linear_attention", "deltanet", "rls", "softmax_attention"),
    feature_map: str = "silu",
):
    """Zoology's figure: accuracy against the state size in floats (log axis), one line per layer, one panel per
    task ``(T, N)``; each point is a width at its best learning rate, the bars span the seeds (min–max)."""
    from plotly.subplots import make_subplots

    from ttr_edu.viz.figures import TEMPLATE

    conv = [r for r in rows if r["short_conv"]]
    tasks = sorted({(r["seq_len"], r["num_pairs"]) for r in conv}, key=lambda tn: tn[1])
    fig = make_subplots(
        rows=1, cols=len(tasks), shared_yaxes=True, subplot_titles=[f"T = {t}, N = {n}" for t, n in tasks]
    )
    for col, (t, n) in enumerate(tasks, start=1):
        for model in models:
            fm = feature_map if MODELS[model].parametric else ""
            picked = [
                r for r in conv if (r["model"], r["feature_map"], r["seq_len"], r["num_pairs"]) == (model, fm, t, n)
            ]
            widths = sorted({r["d_model"] for r in picked})
            if len(widths) < 2:
                continue
            stats = [best(picked, d_model=d) for d in widths]
            states = [next(r["state_size"] for r in picked if r["d_model"] == d) for d in widths]
            symbol, dash, colour = STYLE.get(model, ("circle", "solid", None))
            fig.add_scatter(
                x=states,
                y=[s["mean"] for s in stats],
                mode="lines+markers",
                name=MODELS[model].label,
                legendgroup=model,
                showlegend=col == 1,
                line=dict(color=colour, dash=dash),
                marker=dict(symbol=symbol, size=9, color=colour),
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=[s["max"] - s["mean"] for s in stats],
                    arrayminus=[s["mean"] - s["min"] for s in stats],
                    thickness=1.2,
                    width=4,
                ),
                customdata=[[d, s["lr"], s["min"], s["max"], s["n"]] for d, s in zip(widths, stats)],
                hovertemplate="d = %{customdata[0]}, state %{x} floats: mean %{y:.2f} at lr %{customdata[1]:.0e}, "
                "seeds %{customdata[2]:.2f}–%{customdata[3]:.2f} (%{customdata[4]} seeds)",
                row=1,
                col=col,
            )
        fig.update_xaxes(title_text="state size (floats per sequence)", type="log", row=1, col=col)
    fig.update_yaxes(title_text="accuracy (fraction of queries)", range=[0, 1.04], row=1, col=1)
    fig.update_layout(
        template=TEMPLATE,
        height=430,
        title=f"MQAR accuracy against state size ({FEATURE_MAP_TITLES[feature_map]}; best learning rate per point, "
        "bars: min–max of the seeds)",
        legend=dict(orientation="h", y=-0.22),
    )
    return fig


def ablation_figure(rows: list[dict], d_model: int = 32):
    """With and without the short convolution, per model, at the best learning rate of each: the mean over the seeds
    (bar) and every seed (dots)."""
    import plotly.graph_objects as go

    from ttr_edu.viz.figures import TEMPLATE

    models = [m for m in MODELS if any(r["model"] == m and not r["short_conv"] for r in rows)]
    fig = go.Figure()
    for conv, colour, name in ((True, "#4c78a8", "with the short convolution"), (False, "#e45756", "without it")):
        labels, means, dots_x, dots_y = [], [], [], []
        for m in models:
            fm = "silu" if MODELS[m].parametric else ""
            where = dict(model=m, feature_map=fm, short_conv=conv, d_model=d_model)
            b = best(rows, **where)
            seeds = [r["accuracy"] for r in rows if all(r[k] == v for k, v in where.items()) and r["lr"] == b["lr"]]
            labels.append(MODELS[m].label)
            means.append(b["mean"])
            dots_x += [MODELS[m].label] * len(seeds)
            dots_y += seeds
        fig.add_bar(x=labels, y=means, name=name, marker_color=colour, offsetgroup=name, opacity=0.75)
        fig.add_scatter(
            x=dots_x,
            y=dots_y,
            mode="markers",
            marker=dict(color="black", size=6, symbol="circle-open"),
            offsetgroup=name,
            name=f"each seed ({name})",
            showlegend=not conv,
            legendgroup="seeds",
        )
    fig.update_layout(
        template=TEMPLATE,
        barmode="group",
        scattermode="group",
        height=400,
        title=f"The short convolution, d = {d_model} (bars: mean of the seeds at each one's best learning rate)",
        xaxis_title="layer",
        yaxis_title="accuracy (fraction of queries)",
        yaxis_range=[0, 1.04],
        legend=dict(orientation="h", y=-0.25),
    )
    return fig


if __name__ == "__main__":
    raise SystemExit(main())
