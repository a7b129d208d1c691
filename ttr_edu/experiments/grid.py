"""What the retrieval experiments share: one grid point's run, CSV in and out, and the cliff position.

A grid point trains (or, for random keys, only evaluates) one :class:`ttr_edu.models.RetrievalModel` on one
task and returns one CSV row. Rows are plain dicts, so the notebooks plot them with plotly and no data-frame
library. The command line (:func:`grid_main`) runs the points through the shared runner
(:mod:`ttr_edu.experiments.runner`): locally or on Dask, rows appended as they finish under their provenance, and
``--resume`` only onto a CSV of the same recipe.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import partial
from importlib import resources
from pathlib import Path

import plotly.graph_objects as go
import torch
from tqdm.auto import tqdm

from ttr_edu.experiments import runner
from ttr_edu.models.retrieval import RetrievalModel
from ttr_edu.tasks.retrieval import capacity_batch, overwrite_batch
from ttr_edu.train import evaluate, progress_enabled, train
from ttr_edu.viz.figures import TEMPLATE

__all__ = [
    "ModelSpec",
    "TrainingSpec",
    "run_point",
    "run_grid",
    "write_csv",
    "read_csv",
    "load_shipped",
    "cliff_positions",
    "loss_figure",
]

TASKS = {"capacity": capacity_batch, "overwrite": overwrite_batch}


@dataclass(frozen=True)
class ModelSpec:
    """One curve of a figure: a label, the feature map and its parameters, the update rule, trained keys or not."""

    label: str
    feature_map: str | None
    params: tuple[tuple[str, int], ...] = ()
    update_rule: str = "sum"
    trained_keys: bool = True

    def build(self, num_keys: int, d_k: int) -> RetrievalModel:
        return RetrievalModel(
            num_keys,
            num_keys,
            d_k=d_k,
            feature_map=self.feature_map,
            feature_map_params=dict(self.params),
            update_rule=self.update_rule,
            trained_keys=self.trained_keys,
        )


@dataclass(frozen=True)
class TrainingSpec:
    """Hyper-parameters shared by every point of a grid (the paper: Adam 1e-3, batch 32, stop at 1e-3)."""

    d_k: int = 16
    batch_size: int = 32
    lr: float = 1e-2  # ten times the paper's: our step budget is far smaller than their train-until-solved
    max_steps: int = 3000
    target_loss: float = 1e-3
    eval_every: int = 100
    eval_batches: int = 4
    seed: int = 0


def run_point(
    task: str, spec: ModelSpec, num_keys: int, training: TrainingSpec, *, progress: bool | None = False
) -> dict:
    """Train ``spec`` on ``task`` (``"capacity"`` or ``"overwrite"``) with ``S = num_keys``; return a CSV row.

    Untrained-key models are only evaluated (on ``eval_batches`` batches): they have nothing to learn.
    """
    if task not in TASKS:
        raise ValueError(f"task: unknown task {task!r}; valid tasks are {', '.join(TASKS)}")
    make_batch = TASKS[task]

    def sample(generator: torch.Generator):
        return make_batch(training.batch_size, num_keys, generator=generator)

    torch.manual_seed(training.seed)  # the model's initial weights
    model = spec.build(num_keys, training.d_k)
    start = time.perf_counter()
    threads = torch.get_num_threads()
    # The matrices are tiny: extra threads only fight over the cores (10x slower on a busy 2-core machine).
    torch.set_num_threads(1)
    try:
        best, final, steps, reached = _fit(model, spec, sample, training, progress)
    finally:
        torch.set_num_threads(threads)
    return {
        "task": task,
        "model": spec.label,
        "feature_map": spec.feature_map or "softmax",
        "update_rule": spec.update_rule,
        "keys": "trained" if spec.trained_keys else "random",
        "d_dot": "" if model.d_dot is None else model.d_dot,
        "num_keys": num_keys,
        "best_eval_loss": round(best, 6),
        "final_eval_loss": round(final, 6),
        "steps": steps,
        "reached_target": reached,
        "seconds": round(time.perf_counter() - start, 2),
        **{f"train_{k}": v for k, v in asdict(training).items()},
    }


def _fit(model, spec: ModelSpec, sample, training: TrainingSpec, progress) -> tuple[float, float, int, bool]:
    """Train (or only evaluate, for random keys); return best and final loss, steps and whether the target was hit."""
    if spec.trained_keys:
        result = train(
            model,
            sample,
            max_steps=training.max_steps,
            lr=training.lr,
            target_loss=training.target_loss,
            eval_every=training.eval_every,
            eval_batches=training.eval_batches,
            seed=training.seed,
            progress=progress,
            desc=spec.label,
        )
        return result.best_eval_loss, result.final_eval_loss, result.steps, result.reached_target
    generator = torch.Generator().manual_seed(training.seed + 1)
    loss = evaluate(model, [sample(generator) for _ in range(training.eval_batches)])
    return loss, loss, 0, loss <= training.target_loss


def run_grid(task: str, points, training: TrainingSpec = TrainingSpec(), *, progress: bool | None = None) -> list[dict]:
    """Run ``points`` (``(ModelSpec, S)`` pairs) on ``task``; one row per point, each also printed as it lands."""
    rows = []
    show = progress_enabled(progress)
    for spec, num_keys in tqdm(points, desc=f"{task} grid", disable=not show):
        row = run_point(task, spec, num_keys, training, progress=False)
        rows.append(row)
        if show:
            tqdm.write(
                f"{row['model']:28s} S={num_keys:4d} best loss {row['best_eval_loss']:.4f} "
                f"steps {row['steps']:5d} ({row['seconds']:.0f} s)"
            )
    return rows


_NUMERIC = {
    "d_dot",
    "num_keys",
    "steps",
    "train_d_k",
    "train_batch_size",
    "train_max_steps",
    "train_eval_every",
    "train_eval_batches",
    "train_seed",
}
_FLOAT = {"best_eval_loss", "final_eval_loss", "seconds", "train_lr", "train_target_loss"}


def write_csv(rows: list[dict], path: str | Path) -> Path:
    """Write ``rows`` (dicts with the same keys) to ``path``; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def read_csv(path: str | Path) -> list[dict]:
    """Read a grid CSV back, with numbers as numbers and ``reached_target`` as a bool (``#`` provenance lines, as the
    runner writes them, are skipped)."""
    with Path(path).open(newline="") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    for row in rows:
        for key, value in row.items():
            if key in _NUMERIC and value != "":
                row[key] = int(value)
            elif key in _FLOAT:
                row[key] = float(value)
            elif key == "reached_target":
                row[key] = value == "True"
    return rows


def load_shipped(name: str) -> list[dict]:
    """The full-grid CSV shipped with the package: ``"capacity"`` or ``"overwrite"``
    (``ttr_edu/experiments/results/*_grid.csv``)."""
    if name not in TASKS:
        raise ValueError(f"name: unknown grid {name!r}; valid names are {', '.join(TASKS)}")
    with resources.as_file(resources.files("ttr_edu.experiments") / "results" / f"{name}_grid.csv") as path:
        return read_csv(path)


def cliff_positions(rows: list[dict], threshold: float = 1e-2) -> dict[str, tuple[int | None, int | None]]:
    """Per model: (largest S solved, smallest S failed), where "solved" means best loss ≤ ``threshold``.

    The first entry is the last S before the first failure, so a lucky solve after a failure does not count.
    """
    by_model: dict[str, list[dict]] = {}
    for row in rows:
        by_model.setdefault(row["model"], []).append(row)
    cliffs = {}
    for model, points in by_model.items():
        points.sort(key=lambda r: r["num_keys"])
        solved, failed = None, None
        for row in points:
            if row["best_eval_loss"] <= threshold:
                solved = row["num_keys"]
            else:
                failed = row["num_keys"]
                break
        cliffs[model] = (solved, failed)
    return cliffs


def loss_figure(rows: list[dict], *, title: str, per_d_dot: bool = False, d_dot_marks: bool = True) -> go.Figure:
    """Best evaluation loss against S, one line per model (log y); optionally against S / d_dot.

    ``d_dot_marks`` draws a dotted vertical line at each model's d_dot, in the model's colour.
    """
    figure = go.Figure()
    colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
    by_model: dict[str, list[dict]] = {}
    for row in rows:
        by_model.setdefault(row["model"], []).append(row)
    for i, (model, points) in enumerate(by_model.items()):
        points = sorted(points, key=lambda r: r["num_keys"])
        colour = colours[i % len(colours)]
        d_dot = points[0]["d_dot"]
        scale = d_dot if per_d_dot and d_dot != "" else 1
        if per_d_dot and d_dot == "":
            continue  # softmax has no d_dot
        x = [r["num_keys"] / scale for r in points]
        # A loss of exactly 0 cannot sit on a log axis; the target loss is the floor that matters here.
        y = [max(r["best_eval_loss"], 1e-5) for r in points]
        figure.add_trace(go.Scatter(x=x, y=y, name=model, mode="lines+markers", line={"color": colour}))
        if d_dot_marks and d_dot != "":
            figure.add_vline(x=d_dot / scale, line={"color": colour, "dash": "dot", "width": 1})
    figure.add_hline(
        y=1e-3,
        line={"color": "grey", "dash": "dash", "width": 1},
        annotation_text="target 1e-3",
        annotation_position="bottom right",
    )
    any_trained = any(row["keys"] == "trained" for row in rows)  # random keys are only evaluated: no "best"
    figure.update_layout(
        title=title,
        xaxis_title="S / d_dot" if per_d_dot else "number of keys S",
        yaxis_title="best evaluation loss" if any_trained else "evaluation loss",
        template=TEMPLATE,
    )
    figure.update_yaxes(type="log")
    return figure


#: the columns of a grid point's row (:func:`run_point`), as the runner writes them
FIELDS = (
    "task",
    "model",
    "feature_map",
    "update_rule",
    "keys",
    "d_dot",
    "num_keys",
    "best_eval_loss",
    "final_eval_loss",
    "steps",
    "reached_target",
    "seconds",
    *(f"train_{name}" for name in TrainingSpec.__dataclass_fields__),
)


def _int_or_blank(text: str) -> int | str:
    return "" if text == "" else int(text)


def experiment(task: str) -> runner.Experiment:
    """The CSV of the ``capacity`` or ``overwrite`` grid for :mod:`ttr_edu.experiments.runner`."""
    types: dict = {name: int for name in _NUMERIC}
    types.update({name: float for name in _FLOAT}, d_dot=_int_or_blank, reached_target=bool)
    return runner.Experiment(
        name=task, fields=FIELDS, key=("task", "model", "num_keys", "train_seed"), types=types, timing=("seconds",)
    )


def _point_cell(task: str, specs: dict[str, ModelSpec], training: TrainingSpec, cell: dict) -> dict:
    """The runner's cell function: one grid point, named by its model label and S."""
    return run_point(task, specs[cell["model"]], cell["num_keys"], training, progress=False)


def grid_main(
    task: str,
    description: str,
    *,
    quick_grid: Callable[[], list],
    full_grid: Callable[[], list],
    quick_steps: int,
    d_dot: dict[str, int],
    cliff_rows: Callable[[list[dict]], list[dict]] = lambda rows: rows,
    argv: list[str] | None = None,
) -> int:
    """The command line shared by ``python -m ttr_edu.experiments capacity|overwrite``; returns the exit status.

    Runs the quick or the full grid through :func:`ttr_edu.experiments.runner.run` (``--jobs``, ``--scheduler``,
    ``--resume``), and prints where each model's loss first exceeds 0.01 (:func:`cliff_positions` over
    ``cliff_rows(rows)``) next to its ``d_dot``.
    """
    return runner.guarded(
        partial(_grid_main, task, description, quick_grid, full_grid, quick_steps, d_dot, cliff_rows)
    )(argv)


def _grid_main(task, description, quick_grid, full_grid, quick_steps, d_dot, cliff_rows, argv) -> int:
    parser = runner.ArgumentParser(prog=f"python -m ttr_edu.experiments {task}", description=description)
    parser.add_argument("--quick", action="store_true", help="run the small subset only")
    parser.add_argument(
        "--max-steps", type=int, default=None, help=f"default: {TrainingSpec.max_steps}, or {quick_steps} with --quick"
    )
    parser.add_argument("--seed", type=int, default=TrainingSpec.seed)
    runner.add_arguments(parser, f"{task}_grid.csv")
    args = parser.parse_args(argv)
    options = runner.runner_options(parser, args)
    if args.max_steps is not None and args.max_steps < 1:
        parser.error(f"--max-steps: expected a positive int, got {args.max_steps}")
    if args.seed < 0:
        parser.error(f"--seed: expected an int >= 0, got {args.seed}")
    points = quick_grid() if args.quick else full_grid()
    max_steps = args.max_steps or (quick_steps if args.quick else TrainingSpec.max_steps)
    training = replace(TrainingSpec(), max_steps=max_steps, seed=args.seed)
    specs = {spec.label: spec for spec, _ in points}
    cells = [{"task": task, "model": spec.label, "num_keys": s, "train_seed": training.seed} for spec, s in points]
    recipe = {"grid": "quick" if args.quick else "full", "task": task, "training": asdict(training)}
    result = runner.run(
        experiment(task),
        recipe,
        cells,
        partial(_point_cell, task, specs, training),
        command=runner.command_line(task, argv),
        **options,
    )
    print(
        f"wrote {len(result.rows)} rows to {options['out']} ({result.trained} trained in {result.wall_seconds:.0f} s)"
    )
    for model, (solved, failed) in cliff_positions(cliff_rows(result.rows)).items():
        print(f"  {model:16s} d_dot={d_dot.get(model, '-')!s:>3}: loss <= 0.01 up to S={solved}, fails at S={failed}")
    return runner.report_lost(result, experiment(task))
