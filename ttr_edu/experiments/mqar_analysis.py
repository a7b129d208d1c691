"""Reading an MQAR grid (:mod:`.mqar`): the best learning rate per setting, a table, the state frontier and its figures.

* :func:`best` picks a setting's learning rate by the mean accuracy over its seeds (Zoology reports the best rate)
  and gives the seeds' spread there; :func:`table` lists every setting that way.
* :func:`frontier` fits each layer's accuracy against the logarithm of its state (Based's axis): a logistic curve
  ``logit(accuracy) = slope · (log2 state − log2 s50)``, whose *offset* ``s50`` is the state at which the layer
  recalls half of the queries. Its intervals come from a bootstrap over the seeds. Layers on one frontier have the
  same ``s50``; a layer that needs ``2^x`` times another's state for the same recall has ``x`` more doublings.
* :func:`frontier_figure` draws the points (mean over the seeds at each width's best rate, bars from the lowest to
  the highest seed) and the fitted curves, one panel per task; :func:`ablation_figure` the convolution ablation.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable

from ttr_edu.experiments.mqar import MODELS, VARIANTS, choose_lr, label

__all__ = [
    "summarise",
    "best",
    "setting_of",
    "settings",
    "table",
    "seeds_at_best",
    "frontier",
    "frontier_figure",
    "detectable_difference",
    "ablation_figure",
    "STYLE",
    "BASELINE",
]

#: the columns that name a setting: a cell's key without the learning rate and the seed
SETTING = (
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
)
#: the setting every comparison starts from: one layer with its convolution, one head, random filler, the course's
#: training recipe (the feature map is the layer's own: ``"silu"`` for a parametric memory, ``""`` for attention)
BASELINE = {"short_conv": True, "n_layers": 1, "num_heads": 1, "filler": "random", "training": "course"}

#: marker, dash and colour per model, fixed so that a model looks the same in every figure
STYLE = {
    "linear_attention": ("circle", "solid", "#636efa"),
    "linear_attention_elu": ("circle-open", "dot", "#ab63fa"),
    "deltanet": ("square", "dash", "#ef553b"),
    "gated_deltanet": ("square-open", "dot", "#ff7f0e"),
    "rls": ("diamond", "dashdot", "#00cc96"),
    "mesa": ("diamond-open", "dot", "#2ca02c"),
    "softmax_attention": ("x", "longdash", "#444444"),
    "local_linear_attention": ("cross", "dot", "#19d3f3"),
}


def _matches(row: dict, where: dict) -> bool:
    return all(row[k] == v for k, v in where.items())


def summarise(rows: list[dict], **where) -> dict:
    """Mean, min, max and std (population) of the accuracy over the rows matching ``where`` (the seeds of a setting).

    ``summarise(rows, model="deltanet", feature_map="silu", d_model=32, lr=3e-3)``.

    Raises:
        ValueError: no row matches (the message gives the filter).
    """
    accs = [r["accuracy"] for r in rows if _matches(r, where)]
    if not accs:
        raise ValueError(f"where: no row matches {where}")
    mean = sum(accs) / len(accs)
    std = (sum((a - mean) ** 2 for a in accs) / len(accs)) ** 0.5
    return {"mean": mean, "min": min(accs), "max": max(accs), "std": std, "n": len(accs)}


def best(rows: list[dict], **where) -> dict:
    """The best learning rate of one setting and the seeds' spread there (Zoology reports the best learning rate).

    Among the rows matching ``where`` (the learning rates and seeds of one setting), the rate is chosen by
    :func:`ttr_edu.experiments.mqar.choose_lr` on the mean over the seeds trained at every rate; the spread is over
    every seed trained at that rate.

    Returns:
        :func:`summarise` of the chosen rate's seeds, plus ``lr`` (the rate) and ``by_lr`` (mean accuracy per rate,
        on the seeds common to all rates).

    Raises:
        ValueError: no row matches.
    """
    matching = [r for r in rows if _matches(r, where)]
    if not matching:
        raise ValueError(f"where: no row matches {where}")
    lr = choose_lr(matching)
    rates = sorted({r["lr"] for r in matching})
    common = set.intersection(*({r["seed"] for r in matching if r["lr"] == rate} for rate in rates))
    by_lr = {rate: summarise([r for r in matching if r["seed"] in common], lr=rate)["mean"] for rate in rates}
    return {**summarise(matching, lr=lr), "lr": lr, "by_lr": by_lr}


def setting_of(model: str, d_model: int, seq_len: int = 64, num_pairs: int = 8, **changes) -> dict:
    """The ``where`` filter of one setting: :data:`BASELINE` with ``model``'s own feature map, the task and width,
    and ``changes`` (``filler="zero"``, ``feature_map="elu_plus_one"``, ...)."""
    feature_map = "" if model not in VARIANTS and not _parametric(model) else "silu"
    if model in VARIANTS:
        feature_map = "elu_plus_one"
    return {
        **BASELINE,
        "model": model,
        "feature_map": feature_map,
        "seq_len": seq_len,
        "num_pairs": num_pairs,
        "d_model": d_model,
        **changes,
    }


def _parametric(model: str) -> bool:
    spec = MODELS[model]
    return spec.parametric


def seeds_at_best(rows: list[dict], where: dict) -> dict[int, float]:
    """Each seed's accuracy at the setting's best learning rate (:func:`best`), by seed."""
    lr = best(rows, **where)["lr"]
    return {
        r["seed"]: r["accuracy"] for r in sorted(rows, key=lambda r: r["seed"]) if _matches(r, where) and r["lr"] == lr
    }


def settings(rows: list[dict]) -> list[dict]:
    """The distinct settings of ``rows`` (as ``where`` filters), the baseline first, then by model, task and width."""
    order = {name: i for i, name in enumerate([*MODELS, *VARIANTS])}
    found = {tuple(r[k] for k in SETTING) for r in rows}
    baseline = tuple(BASELINE.values())

    def key(s):
        where = dict(zip(SETTING, s))
        return (
            tuple(where[k] for k in BASELINE) != baseline,
            tuple(where[k] for k in BASELINE),
            s[7],
            s[8],
            order.get(s[0], 99),
            s[1],
            s[9],
        )

    return [dict(zip(SETTING, s)) for s in sorted(found, key=key)]


def table(rows: list[dict]) -> str:
    """One line per setting: the best learning rate, ``mean [lowest–highest seed]`` there and the number of seeds,
    the state in floats; a setting's changes from :data:`BASELINE` in the last column."""
    head = f"{'layer':<38}{'T':>4}{'N':>4}{'d':>5}{'state':>8}{'best lr':>9}   {'accuracy [seeds]':<24}change"
    lines = [head, "-" * (len(head) + 12)]
    for where in settings(rows):
        b = best(rows, **where)
        state = next(r["state_size"] for r in rows if _matches(r, where))
        change = ", ".join(f"{k.replace('_', ' ')} {where[k]}" for k in BASELINE if where[k] != BASELINE[k])
        name = label(where["model"]) + (
            f", φ = {where['feature_map']}" if where["feature_map"] not in ("silu", "") else ""
        )
        shown = f"{b['mean']:.2f} [{b['min']:.2f}–{b['max']:.2f}] ({b['n']})"
        lines.append(
            f"{name:<38}{where['seq_len']:>4}{where['num_pairs']:>4}{where['d_model']:>5}{state:>8}{b['lr']:>9.0e}   "
            f"{shown:<24}{change}"
        )
    return "\n".join(lines)


def detectable_difference(a: list[float], b: list[float], alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest difference of means a two-sided t-test at level ``alpha`` would detect with probability
    ``power``, given the seeds' spread: ``(t_{1-alpha/2} + t_{power}) · s · sqrt(1/n_a + 1/n_b)``, with ``s`` the
    pooled sample standard deviation and ``n_a + n_b - 2`` degrees of freedom. A null result ("not separated")
    is stated with it: a true difference this large would have been seen four times in five.

    Raises:
        ValueError: fewer than two values on a side.
    """
    from scipy.special import stdtrit  # Student-t quantiles; scipy comes with scikit-learn

    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"a, b: need at least two values each, got {len(a)} and {len(b)}")
    df = len(a) + len(b) - 2

    def ss(values):
        mean = sum(values) / len(values)
        return sum((v - mean) ** 2 for v in values)

    pooled = ((ss(a) + ss(b)) / df) ** 0.5
    return float(stdtrit(df, 1 - alpha / 2) + stdtrit(df, power)) * pooled * (1 / len(a) + 1 / len(b)) ** 0.5


# ---------------------------------------------------------------------------------------------------------------------
# The state frontier
# ---------------------------------------------------------------------------------------------------------------------


def _fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """``(slope, log2 s50)`` of ``logit(p) = slope · (x − log2 s50)`` maximising ``Σ a log p + (1 − a) log(1 − p)``
    over the points ``(x, a)`` (``x = log2 state``, ``a`` the accuracy): a binomial fit with the same number of
    queries behind every point, which then drops out. Newton's method on ``logit(p) = b0 + b1 x``, each step halved
    until the likelihood rises. Points that no curve separates (all at 0, all at 1) give ``(0, nan)``."""
    xs = [x for x, _ in points]
    centre = sum(xs) / len(xs)
    us = [x - centre for x in xs]
    accs = [a for _, a in points]

    def loglik(b0, b1):
        total = 0.0
        for u, a in zip(us, accs):
            z = b0 + b1 * u
            total += a * z - (z if z > 30 else math.log1p(math.exp(z)))  # a log p + (1 - a) log(1 - p)
        return total

    b0 = b1 = 0.0
    current = loglik(b0, b1)
    for _ in range(200):
        g0 = g1 = h00 = h01 = h11 = 0.0
        for u, a in zip(us, accs):
            z = b0 + b1 * u
            p = 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0
            g0, g1 = g0 + a - p, g1 + (a - p) * u
            w = p * (1 - p)
            h00, h01, h11 = h00 + w, h01 + w * u, h11 + w * u * u
        det = h00 * h11 - h01 * h01
        if det <= 1e-300:
            break
        d0, d1 = (h11 * g0 - h01 * g1) / det, (h00 * g1 - h01 * g0) / det
        step = 1.0
        while step > 1e-6 and loglik(b0 + step * d0, b1 + step * d1) < current - 1e-12:
            step /= 2
        b0, b1 = b0 + step * d0, b1 + step * d1
        previous, current = current, loglik(b0, b1)
        if abs(step * d0) + abs(step * d1) < 1e-10 or current - previous < 1e-14:
            break
    if abs(b1) < 1e-9 or all(a <= 0 for a in accs) or all(a >= 1 for a in accs):
        return 0.0, math.nan
    return b1, centre - b0 / b1


def _power(x: float) -> float:
    """``2^x``, ``inf`` or ``0`` beyond the range of a float, ``nan`` for ``nan``."""
    if math.isnan(x):
        return math.nan
    return 2.0 ** max(min(x, 1000.0), -1000.0)


def _interval(values: list[float], level: float) -> tuple[float, float]:
    """The central ``level`` of ``values`` (percentiles, the nearest draws outward)."""
    values = sorted(values)
    last = len(values) - 1
    return values[int((1 - level) / 2 * last)], values[math.ceil((1 + level) / 2 * last)]


def frontier(
    rows: list[dict],
    models: Iterable[str],
    *,
    seq_len: int = 64,
    num_pairs: int = 8,
    boot: int = 400,
    level: float = 0.9,
    seed: int = 0,
    **changes,
) -> dict[str, dict]:
    """Each layer's logistic fit of accuracy against ``log2`` of its state on one task (Based's frontier).

    The points are every seed at each width's best learning rate (:func:`best`) of the :data:`BASELINE` setting, or
    of the setting ``changes`` make of it (``training="zoology"``, ``filler="zero"``). The
    interval of each number is the central ``level`` of ``boot`` refits, each on the seeds drawn again with
    replacement at every width (a bootstrap over seeds: it carries the seed-to-seed spread, which is far larger than
    the binomial noise of the held-out queries).

    Returns:
        ``{model: {"s50": state at half recall, "s50_interval": (low, high), "slope": logit per doubling of state,
        "slope_interval": ..., "points": [(state, [accuracy per seed]), ...], "inside": whether s50 lies within the
        states measured}}``.

    Raises:
        ValueError: a model with fewer than two widths on the task.
    """
    out = {}
    rng = random.Random(seed)
    for model in models:
        where = setting_of(model, 0, seq_len, num_pairs, **changes)
        where.pop("d_model")
        widths = sorted({r["d_model"] for r in rows if _matches(r, where)})
        if len(widths) < 2:
            raise ValueError(f"models: {model} has {len(widths)} width(s) on T = {seq_len}, N = {num_pairs}; need 2")
        points = []
        for d in widths:
            at = {**where, "d_model": d}
            state = next(r["state_size"] for r in rows if _matches(r, at))
            points.append((state, list(seeds_at_best(rows, at).values())))
        slope, x50 = _fit([(math.log2(s), a) for s, accs in points for a in accs])
        draws = [(slope, x50)] if boot == 0 else []  # no bootstrap: the intervals are the point itself
        for _ in range(boot):
            resampled = [(math.log2(s), rng.choice(accs)) for s, accs in points for _ in accs]
            draws.append(_fit(resampled))
        s50_lo, s50_hi = _interval([_power(x) for _, x in draws if not math.isnan(x)] or [math.nan], level)
        out[model] = {
            "s50": _power(x50),
            "s50_interval": (s50_lo, s50_hi),
            "slope": slope,
            "slope_interval": _interval([b for b, _ in draws], level),
            "points": points,
            "inside": points[0][0] <= _power(x50) <= points[-1][0],
        }
    return out


def frontier_figure(
    rows: list[dict], models: Iterable[str], tasks: Iterable[tuple[int, int]], fits: dict | None = None, **changes
):
    """Accuracy against state (floats per sequence, log axis), one panel per task ``(T, N)``, one colour per layer:
    each width's mean over the seeds at its best learning rate, bars from the lowest to the highest seed, and the
    fitted frontier (:func:`frontier`) as a line. ``fits`` maps ``(T, N)`` to the task's :func:`frontier` result;
    ``changes`` pick a setting other than the baseline, as :func:`frontier` takes them."""
    from plotly.subplots import make_subplots

    from ttr_edu.viz.figures import TEMPLATE

    tasks, models = list(tasks), list(models)
    fig = make_subplots(
        rows=1, cols=len(tasks), shared_yaxes=True, subplot_titles=[f"T = {t}, N = {n}" for t, n in tasks]
    )
    for col, (t, n) in enumerate(tasks, start=1):
        fitted = (fits or {}).get((t, n)) or frontier(
            rows, [m for m in models if _has(rows, m, t, n, changes)], seq_len=t, num_pairs=n, boot=0, **changes
        )
        for model in models:
            if model not in fitted:
                continue
            symbol, dash, colour = STYLE.get(model, ("circle", "solid", None))
            fit = fitted[model]
            states = [s for s, _ in fit["points"]]
            means = [sum(a) / len(a) for _, a in fit["points"]]
            fig.add_scatter(
                x=states,
                y=means,
                mode="markers",
                name=label(model),
                legendgroup=model,
                showlegend=col == 1,
                marker=dict(symbol=symbol, size=9, color=colour),
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=[max(a) - m for (_, a), m in zip(fit["points"], means)],
                    arrayminus=[m - min(a) for (_, a), m in zip(fit["points"], means)],
                    thickness=1.2,
                    width=4,
                ),
                customdata=[[len(a), min(a), max(a)] for _, a in fit["points"]],
                hovertemplate="state %{x} floats: mean %{y:.2f}, seeds %{customdata[1]:.2f}–%{customdata[2]:.2f} "
                "(%{customdata[0]} seeds)",
                row=1,
                col=col,
            )
            low, high = math.log2(states[0]) - 0.5, math.log2(states[-1]) + 0.5
            xs = [2 ** (low + (high - low) * i / 60) for i in range(61)]
            if not 0 < fit["s50"] < math.inf:  # no curve: the points alone
                continue
            x50 = math.log2(fit["s50"])
            ys = [1 / (1 + math.exp(min(-fit["slope"] * (math.log2(x) - x50), 700.0))) for x in xs]
            fig.add_scatter(
                x=xs,
                y=ys,
                mode="lines",
                line=dict(color=colour, dash=dash, width=1.5),
                legendgroup=model,
                showlegend=False,
                hoverinfo="skip",
                row=1,
                col=col,
            )
        fig.update_xaxes(title_text="state size (floats per sequence)", type="log", row=1, col=col)
    fig.update_yaxes(title_text="accuracy (fraction of queries)", range=[0, 1.04], row=1, col=1)
    fig.update_layout(
        template=TEMPLATE,
        height=440,
        legend=dict(orientation="h", y=-0.22),
        title="MQAR accuracy against state: each width at its best learning rate (bars: lowest to "
        "highest seed) and each layer's fitted frontier",
    )
    return fig


def _has(rows, model, t, n, changes) -> bool:
    where = setting_of(model, 0, t, n, **changes)
    where.pop("d_model")
    return len({r["d_model"] for r in rows if _matches(r, where)}) >= 2


def ablation_figure(rows: list[dict], d_model: int = 16, seq_len: int = 64, num_pairs: int = 8):
    """The short convolution, per arm at the best learning rate of each: the mean over the seeds (bar) and every
    seed (dots). Arms: each layer with and without it, and any deeper model without it."""
    import plotly.graph_objects as go

    from ttr_edu.viz.figures import TEMPLATE

    arms = []
    for where in settings(rows):
        if (where["d_model"], where["seq_len"], where["num_pairs"]) != (d_model, seq_len, num_pairs):
            continue
        if where["filler"] != "random" or where["training"] != "course" or where["feature_map"] not in ("silu", ""):
            continue
        if where["short_conv"] is False or any(not r["short_conv"] and r["model"] == where["model"] for r in rows):
            arms.append(where)
    fig = go.Figure()
    names = [label(w["model"]) + ("" if w["n_layers"] == 1 else f", {w['n_layers']} layers") for w in arms]
    for conv, colour, title in ((True, "#4c78a8", "with the short convolution"), (False, "#e45756", "without it")):
        picked = [(name, w) for name, w in zip(names, arms) if w["short_conv"] is conv]
        fig.add_bar(
            x=[name for name, _ in picked],
            y=[best(rows, **w)["mean"] for _, w in picked],
            name=title,
            marker_color=colour,
            offsetgroup=title,
            opacity=0.75,
        )
        dots = [(name, a) for name, w in picked for a in seeds_at_best(rows, w).values()]
        fig.add_scatter(
            x=[n for n, _ in dots],
            y=[a for _, a in dots],
            mode="markers",
            offsetgroup=title,
            marker=dict(color="black", size=6, symbol="circle-open"),
            name=f"each seed ({title})",
            showlegend=not conv,
            legendgroup="seeds",
        )
    fig.update_layout(
        template=TEMPLATE,
        barmode="group",
        scattermode="group",
        height=400,
        title=f"The short convolution, d = {d_model} (bars: mean of the seeds at each arm's best rate)",
        xaxis_title="model",
        yaxis_title="accuracy (fraction of queries)",
        yaxis_range=[0, 1.04],
        legend=dict(orientation="h", y=-0.25),
    )
    return fig
