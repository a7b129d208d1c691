"""``python -m ttr_edu.experiments mqar``: train tiny one-layer models on MQAR over a grid and write a CSV.

The grid is a union of :class:`Block` s, each a product of settings in which one thing varies at a time:

* ``matched``: linear attention, DeltaNet and RLS with the *same* feature map and L2 key normalisation, for two
  feature maps (``identity``: signed features; ``elu_plus_one``: non-negative ones), at ``N = d/2`` and ``N = d``;
* ``gated`` and ``mesa``: gated DeltaNet, and Mesa (gated RLS) at ``N = d``, identity features;
* ``attention`` and ``local``: softmax attention, and local linear attention at ``N = d`` (their state is the
  key-value cache);
* ``no_conv``: the ablation without the short convolution on ``q, k, v``, at ``N = d/2``.

Every cell uses the same recipe (:class:`MQARGrid`): one sequence length that leaves at least half of the query
slots free at every ``N`` (so the task keeps its power-law gaps and filler), the same number of labelled queries per
step at every ``N`` (the batch holds ``labels_per_step / N`` examples), Adam on fresh batches, an early stop at a
small evaluation loss, and the accuracy on held-out examples. Three seeds per cell (model, data and held-out set).

Rows are appended to the CSV as cells finish, under a few ``#`` lines that record the command, the date and the git
commit, so an interrupted run keeps what it has and can be finished with ``--resume``::

    python -m ttr_edu.experiments mqar --jobs 2                      # the full grid -> mqar_grid.csv
    python -m ttr_edu.experiments mqar --quick --out q.csv           # the cells chapter 09 trains live
    python -m ttr_edu.experiments mqar --jobs 2 --resume             # finish an interrupted run

The CSV shipped with the package (``ttr_edu/experiments/results/mqar_grid.csv``, read by :func:`load_results`) is the
full grid.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ttr_edu._internal.progress import progress_enabled
from ttr_edu.experiments import plain_help
from ttr_edu.models.mqar import MODELS, MQARModel
from ttr_edu.tasks.mqar import free_slot_fraction, mqar_batch
from ttr_edu.train import train

__all__ = [
    "Block",
    "Cell",
    "MQARGrid",
    "FULL_GRID",
    "QUICK_GRID",
    "train_cell",
    "run_grid",
    "load_results",
    "summarise",
    "settings",
    "table",
    "accuracy_figure",
    "ablation_figure",
    "STYLE",
    "main",
]

FIELDS = [
    "model",
    "feature_map",
    "short_conv",
    "seq_len",
    "num_pairs",
    "d_model",
    "batch_size",
    "state_size",
    "steps",
    "final_eval_loss",
    "accuracy",
    "train_seconds",
    "cpu_seconds",
    "seed",
]
_TYPES = {
    "short_conv": lambda s: s == "True",
    "seq_len": int,
    "num_pairs": int,
    "d_model": int,
    "batch_size": int,
    "state_size": int,
    "steps": int,
    "final_eval_loss": float,
    "accuracy": float,
    "train_seconds": float,
    "cpu_seconds": float,
    "seed": int,
}


@dataclass(frozen=True)
class Cell:
    """One trained model: the layer, its feature map (``""`` for softmax / local linear), the convolution, N, seed."""

    model: str
    feature_map: str
    short_conv: bool
    num_pairs: int
    seed: int


@dataclass(frozen=True)
class Block:
    """A product of settings: every model × feature map × convolution setting × number of pairs × seed.

    The feature maps apply to the linear memories (:data:`ttr_edu.models_mqar.LINEAR_MEMORIES`); softmax and local
    linear attention get one cell per remaining setting, with feature map ``""``.
    """

    name: str
    models: tuple[str, ...]
    num_pairs: tuple[int, ...]
    feature_maps: tuple[str, ...] = ("identity",)
    short_conv: tuple[bool, ...] = (True,)
    seeds: tuple[int, ...] = (0, 1, 2)

    def cells(self) -> list[Cell]:
        out = []
        for model in self.models:
            if model not in MODELS:
                raise ValueError(f"models: unknown name {model!r} in block {self.name!r}; valid: {', '.join(MODELS)}")
            maps = self.feature_maps if MODELS[model].linear_memory else ("",)
            out += [
                Cell(model, fm, conv, n, seed)
                for fm in maps
                for conv in self.short_conv
                for n in self.num_pairs
                for seed in self.seeds
            ]
        return out


@dataclass(frozen=True)
class MQARGrid:
    """The blocks and the training recipe every cell shares.

    Attributes:
        blocks: the :class:`Block` s; a cell in two blocks is trained once.
        seq_len: tokens per example, the same at every ``N``; at least half of the query slots must stay free
            (``ttr_edu.mqar.free_slot_fraction ≥ 0.5``), so that no cell degenerates into "every slot is a query".
        d_model: the width; with one head a linear memory keeps ``d_model²`` floats (RLS and Mesa twice that).
        vocab_size: kept small (Zoology uses 8192) so that a CPU run fits in minutes; keys come from ``V/2``
            tokens, more than ``d_model``, so the keys of an example can never all be orthogonal.
        labels_per_step: labelled queries per training batch; the batch holds ``labels_per_step / N`` examples, so
            every ``N`` gets the same training signal per step.
        max_steps, lr, target_loss, eval_every: Adam on fresh batches, stopped once the evaluation loss is
            ``<= target_loss`` (checked every ``eval_every`` steps).
        eval_examples: held-out examples for the reported accuracy.

    Raises:
        ValueError: a sequence that fills more than half of the query slots, or ``labels_per_step`` not a multiple
            of some ``N``.
    """

    blocks: tuple[Block, ...]
    seq_len: int = 96
    d_model: int = 16
    vocab_size: int = 128
    labels_per_step: int = 128
    max_steps: int = 600
    lr: float = 1e-2
    target_loss: float = 0.05
    eval_every: int = 100
    eval_examples: int = 256

    def __post_init__(self):
        for n in sorted({c.num_pairs for c in self.cells()}):
            if free_slot_fraction(self.seq_len, n) < 0.5:
                raise ValueError(
                    f"seq_len: {n} pairs in {self.seq_len} tokens leave {free_slot_fraction(self.seq_len, n):.0%} of "
                    f"the query slots free; MQAR needs room between the queries, use seq_len >= {6 * n}"
                )
            if self.labels_per_step % n:
                raise ValueError(f"labels_per_step: {self.labels_per_step} is not a multiple of num_pairs={n}")

    def cells(self) -> list[Cell]:
        """Every cell once, in block order."""
        return list(dict.fromkeys(c for block in self.blocks for c in block.cells()))

    def recipe(self) -> dict:
        """The shared settings (everything but the blocks), as recorded in the CSV's header."""
        return {k: v for k, v in asdict(self).items() if k != "blocks"}


# Sized to the CPU budget (about 30 minutes on 2 cores, summed per-cell CPU time ≈ 20 minutes): two N around the
# capacity of a d = 16 memory (N = d/2 and N = d) for the matched comparison, the costlier layers at N = d only.
ALL_N = (8, 16)
FULL_GRID = MQARGrid(
    blocks=(
        Block("matched", ("linear_attention", "deltanet", "rls"), ALL_N, feature_maps=("identity", "elu_plus_one")),
        Block("gated", ("gated_deltanet",), ALL_N),
        Block("mesa", ("mesa",), (16,)),
        Block("attention", ("softmax_attention",), ALL_N),
        Block("local", ("local_linear_attention",), (16,)),
        Block("no_conv", ("linear_attention", "deltanet", "rls", "softmax_attention"), (8,), short_conv=(False,)),
    )
)
#: the cells chapter 09 trains live (a few seconds): DeltaNet with and without its short convolution, on a small task
QUICK_GRID = MQARGrid(
    blocks=(Block("quick", ("deltanet",), (4,), short_conv=(True, False), seeds=(0,)),),
    seq_len=32,
    vocab_size=64,
    max_steps=250,
    eval_every=50,
    eval_examples=128,
)


def train_cell(grid: MQARGrid, cell: Cell, *, progress: bool | None = False) -> dict:
    """Train one model of the grid and return its CSV row (a dict keyed by ``FIELDS``).

    Runs on one thread: the matrices are tiny, and extra threads only fight over a shared CPU.

    Raises:
        ValueError: an unknown model, or a feature map the model refuses.
    """
    g, n = grid, cell.num_pairs
    batch_size = g.labels_per_step // n

    def sample(generator: torch.Generator):
        return mqar_batch(batch_size, g.seq_len, n, g.vocab_size, generator=generator)

    held_out = mqar_batch(
        g.eval_examples, g.seq_len, n, g.vocab_size, generator=torch.Generator().manual_seed(10_000 + cell.seed)
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(cell.seed)
        model = MQARModel(
            cell.model, g.vocab_size, g.d_model, feature_map=cell.feature_map or None, use_short_conv=cell.short_conv
        )
        start, cpu_start = time.perf_counter(), time.process_time()
        result = train(
            model,
            sample,
            max_steps=g.max_steps,
            lr=g.lr,
            target_loss=g.target_loss,
            eval_every=g.eval_every,
            eval_batches=2,
            seed=cell.seed,
            progress=progress,
            desc=f"{cell.model} {cell.feature_map} N={n}",
        )
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        accuracy = model.accuracy(held_out)
    finally:
        torch.set_num_threads(threads)
    return {
        "model": cell.model,
        "feature_map": cell.feature_map,
        "short_conv": cell.short_conv,
        "seq_len": g.seq_len,
        "num_pairs": n,
        "d_model": g.d_model,
        "batch_size": batch_size,
        "state_size": model.state_size(g.seq_len),
        "steps": result.steps,
        "final_eval_loss": round(result.final_eval_loss, 5),
        "accuracy": round(accuracy, 4),
        "train_seconds": round(seconds, 2),
        "cpu_seconds": round(cpu_seconds, 2),
        "seed": cell.seed,
    }


def _key(row: dict) -> tuple:
    return (
        row["model"],
        row["feature_map"],
        row["short_conv"],
        row["seq_len"],
        row["num_pairs"],
        row["d_model"],
        row["seed"],
    )


def _cell_key(grid: MQARGrid, cell: Cell) -> tuple:
    return (cell.model, cell.feature_map, cell.short_conv, grid.seq_len, cell.num_pairs, grid.d_model, cell.seed)


def _git_commit(out: str | Path | None = None) -> str:
    """The checkout's commit, marked when tracked files other than ``out`` (the CSV being written) differ from it."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    skip = None if out is None else Path(out).resolve()
    dirty = [line for line in status if skip is None or (root / line[3:]).resolve() != skip]
    return f"{commit}{' (uncommitted changes)' if dirty else ''}" if commit else "unknown"


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def run_grid(
    grid: MQARGrid = FULL_GRID,
    out: str | Path | None = None,
    *,
    resume: bool = False,
    jobs: int = 1,
    command: str | None = None,
    progress: bool | None = None,
) -> list[dict]:
    """Train every cell of ``grid``; append each row to the CSV ``out`` (if given) as soon as it is done.

    Args:
        resume: keep the rows already in ``out`` and train only the missing cells.
        jobs: cells trained at once, in worker processes (joblib); each uses one thread.
        command: recorded in the CSV's header (default: this process's command line).

    Returns:
        The rows, in the order of :meth:`MQARGrid.cells`.
    """
    cells = grid.cells()
    done: dict[tuple, dict] = {}
    if resume and out is not None and Path(out).exists():
        done = {_key(row): row for row in load_results(out, show=False)}
    todo = [c for c in cells if _cell_key(grid, c) not in done]
    # longest first (RLS, Mesa and local linear attention cost 2-4 times the others): the jobs end together
    slow = {"rls": 0, "mesa": 0, "local_linear_attention": 0}
    todo.sort(key=lambda c: (slow.get(c.model, 2), -c.num_pairs))
    handle = writer = None
    start, cpu_total = time.perf_counter(), 0.0
    if out is not None:  # resuming appends, so nothing done is ever rewritten
        fresh = not done and not (resume and Path(out).exists())
        handle = open(out, "w" if fresh else "a", newline="")
        command = command or " ".join(["python -m ttr_edu.experiments mqar", *sys.argv[1:]])
        if fresh:
            handle.write(
                f"# command: {command}\n# started: {_now()}\n# git commit: {_git_commit(out)}\n"
                f"# recipe: {json.dumps(grid.recipe())}\n"
            )
            writer = csv.DictWriter(handle, fieldnames=FIELDS)
            writer.writeheader()
        else:
            handle.write(f"# resumed: {_now()} at git commit {_git_commit(out)} ({len(todo)} cells to train)\n")
            writer = csv.DictWriter(handle, fieldnames=FIELDS)
        handle.flush()
    try:
        if jobs > 1 and len(todo) > 1:
            from joblib import Parallel, delayed

            results = Parallel(n_jobs=jobs, return_as="generator_unordered")(delayed(train_cell)(grid, c) for c in todo)
        else:
            results = (train_cell(grid, c) for c in todo)
        for row in tqdm(results, total=len(todo), desc="MQAR grid", disable=not progress_enabled(progress)):
            done[_key(row)] = row
            cpu_total += row["cpu_seconds"]
            if writer is not None:
                writer.writerow(row)
                handle.flush()
        if handle is not None and todo:
            handle.write(
                f"# finished: {_now()}, {len(todo)} cells in {time.perf_counter() - start:.0f} s wall, "
                f"{cpu_total:.0f} s CPU summed over cells\n"
            )
    finally:
        if handle is not None:
            handle.close()
    return [done[_cell_key(grid, c)] for c in cells]


def load_results(path: str | Path | None = None, *, show: bool = True, shipped: str = "mqar_grid.csv") -> list[dict]:
    """Read a grid CSV (default: the grid shipped as ``ttr_edu/experiments/results/<shipped>``, the full grid) as typed
    dicts.

    Args:
        show: print the provenance lines (command, dates, git commit, recipe) recorded in the file.
        shipped: which shipped CSV to read when ``path`` is None (``"mqar_memories.csv"``: the memories grid).
    """
    if path is None:
        text = resources.files("ttr_edu.experiments").joinpath("results", shipped).read_text()
    else:
        text = Path(path).read_text()
    lines = text.splitlines()
    if show:
        print("\n".join(line[2:] for line in lines if line.startswith("# ")))
    data = "\n".join(line for line in lines if not line.startswith("#"))
    return [{k: _TYPES.get(k, str)(v) for k, v in row.items()} for row in csv.DictReader(io.StringIO(data))]


def summarise(rows: list[dict], **where) -> dict:
    """Mean, min, max and std (population) of the accuracy over the seeds of the rows matching ``where``.

    ``summarise(rows, model="deltanet", feature_map="identity", num_pairs=16, short_conv=True)``.

    Raises:
        ValueError: no row matches (the message gives the filter).
    """
    accs = [r["accuracy"] for r in rows if all(r[k] == v for k, v in where.items())]
    if not accs:
        raise ValueError(f"where: no row matches {where}")
    mean = sum(accs) / len(accs)
    std = (sum((a - mean) ** 2 for a in accs) / len(accs)) ** 0.5
    return {"mean": mean, "min": min(accs), "max": max(accs), "std": std, "n": len(accs)}


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m ttr_edu.experiments mqar [--quick] [--out PATH] [--jobs N] [--resume]``."""
    parser = argparse.ArgumentParser(
        prog="python -m ttr_edu.experiments mqar",
        description=plain_help(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="only the cells chapter 09 trains live")
    parser.add_argument("--out", default="mqar_grid.csv", help="the CSV to write (default: mqar_grid.csv)")
    parser.add_argument("--jobs", type=int, default=1, help="cells trained at once, one thread each (default 1)")
    parser.add_argument("--max-steps", type=int, default=None, help="override the grid's max_steps")
    parser.add_argument("--resume", action="store_true", help="keep the cells already in --out, train the rest")
    args = parser.parse_args(argv)
    grid = QUICK_GRID if args.quick else FULL_GRID
    if args.max_steps is not None:
        grid = replace(grid, max_steps=args.max_steps)
    start = time.perf_counter()
    rows = run_grid(
        grid,
        args.out,
        resume=args.resume,
        jobs=args.jobs,
        command=" ".join(["python -m ttr_edu.experiments mqar", *(argv if argv is not None else sys.argv[1:])]),
    )
    print(
        f"{len(rows)} cells in {time.perf_counter() - start:.0f} s wall, "
        f"{sum(r['cpu_seconds'] for r in rows):.0f} s CPU summed over cells -> {args.out}"
    )
    for row in rows:
        print(
            f"  {row['model']:<24} {row['feature_map'] or '-':<13} conv={row['short_conv']!s:<5} "
            f"N={row['num_pairs']:<3} seed={row['seed']} acc={row['accuracy']:.3f} steps={row['steps']:<4} "
            f"{row['cpu_seconds']} s CPU"
        )


if __name__ == "__main__":
    main()


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
    "identity": "φ = identity (signed keys)",
    "elu_plus_one": "φ = ELU+1 (non-negative keys)",
    "relu": "φ = ReLU (non-negative keys)",
    "": "no feature map",
}


def settings(rows: list[dict]) -> list[tuple[str, str, bool]]:
    """The distinct (model, feature map, short conv) settings of ``rows``, in :data:`MODELS` order."""
    order = {name: i for i, name in enumerate(MODELS)}
    found = {(r["model"], r["feature_map"], r["short_conv"]) for r in rows}
    return sorted(found, key=lambda s: (not s[2], s[1] != "identity", s[1], order.get(s[0], len(order))))


def table(rows: list[dict]) -> str:
    """One line per (model, feature map, conv) setting, one column per N: ``mean ± std [min–max]`` over seeds."""
    ns = sorted({r["num_pairs"] for r in rows})
    head = f"{'layer':<24}{'feature map':<14}{'conv':<6}" + "".join(f"{f'N = {n}':^24}" for n in ns)
    lines = [head, "-" * len(head)]
    for model, fm, conv in settings(rows):
        cells = []
        for n in ns:
            try:
                s = summarise(rows, model=model, feature_map=fm, short_conv=conv, num_pairs=n)
            except ValueError:
                cells.append(f"{'·':^24}")
                continue
            cells.append(f"{s['mean']:.2f} ± {s['std']:.2f} [{s['min']:.2f}–{s['max']:.2f}]".center(24))
        lines.append(f"{model:<24}{fm or '—':<14}{'yes' if conv else 'no':<6}" + "".join(cells))
    return "\n".join(lines)


def accuracy_figure(
    rows: list[dict], models=("linear_attention", "deltanet", "rls"), reference: str = "softmax_attention"
):
    """Accuracy against N, one panel per feature map: mean over seeds, bars from the lowest to the highest seed.

    The series are shifted sideways a little and drawn with distinct markers and dashes, so none hides another;
    ``reference`` (a key-value-cache layer, no feature map) is drawn in every panel.
    """
    from plotly.subplots import make_subplots

    from ttr_edu.viz.figures import TEMPLATE

    conv = [r for r in rows if r["short_conv"]]
    maps = [fm for fm in ("identity", "elu_plus_one", "relu") if any(r["feature_map"] == fm for r in conv)]
    fig = make_subplots(rows=1, cols=len(maps), shared_yaxes=True, subplot_titles=[FEATURE_MAP_TITLES[m] for m in maps])
    series = [(m, None) for m in models] + ([(reference, "")] if reference else [])
    for col, fm in enumerate(maps, start=1):
        for i, (model, fixed) in enumerate(series):
            want = fm if fixed is None else fixed
            ns = sorted({r["num_pairs"] for r in conv if r["model"] == model and r["feature_map"] == want})
            if not ns:
                continue
            stats = [summarise(conv, model=model, feature_map=want, num_pairs=n) for n in ns]
            shift = 1 + 0.05 * (i - (len(series) - 1) / 2)  # side by side on the log axis
            symbol, dash, colour = STYLE.get(model, ("circle", "solid", None))
            fig.add_scatter(
                x=[n * shift for n in ns],
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
                customdata=[[n, s["min"], s["max"], s["n"]] for n, s in zip(ns, stats)],
                hovertemplate="N = %{customdata[0]}: mean %{y:.2f}, seeds %{customdata[1]:.2f}–%{customdata[2]:.2f}"
                " (%{customdata[3]} seeds)",
                row=1,
                col=col,
            )
        all_n = sorted({r["num_pairs"] for r in conv})
        fig.update_xaxes(
            title_text="key-value pairs N (d = 16)", type="log", tickvals=all_n, ticktext=all_n, row=1, col=col
        )
    fig.update_yaxes(title_text="accuracy (fraction of queries)", range=[0, 1.04], row=1, col=1)
    fig.update_layout(
        template=TEMPLATE,
        height=420,
        title="MQAR accuracy, same feature map and key norm for every linear memory (mean, bars: min–max of 3 seeds)",
        legend=dict(orientation="h", y=-0.22),
    )
    return fig


def ablation_figure(rows: list[dict], num_pairs: int = 8, feature_map: str = "identity"):
    """With and without the short convolution, per model: the mean over seeds (bar) and every seed (dots)."""
    import plotly.graph_objects as go

    from ttr_edu.viz.figures import TEMPLATE

    models = [m for m in MODELS if any(r["model"] == m and not r["short_conv"] for r in rows)]
    fig = go.Figure()
    for conv, colour, name in ((True, "#4c78a8", "with the short convolution"), (False, "#e45756", "without it")):
        pick = [
            [
                r
                for r in rows
                if r["model"] == m
                and r["short_conv"] == conv
                and r["num_pairs"] == num_pairs
                and r["feature_map"] in (feature_map, "")
            ]
            for m in models
        ]
        labels = [MODELS[m].label for m in models]
        fig.add_bar(
            x=labels,
            y=[sum(r["accuracy"] for r in p) / len(p) for p in pick],
            name=name,
            marker_color=colour,
            offsetgroup=name,
            opacity=0.75,
        )
        fig.add_scatter(
            x=[lab for lab, p in zip(labels, pick) for _ in p],
            y=[r["accuracy"] for p in pick for r in p],
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
        title=f"The short convolution, N = {num_pairs}, φ = {feature_map} (bars: mean of 3 seeds)",
        xaxis_title="layer",
        yaxis_title="accuracy (fraction of queries)",
        yaxis_range=[0, 1.04],
        legend=dict(orientation="h", y=-0.25),
    )
    return fig
