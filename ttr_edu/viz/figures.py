"""Plotly figures for the chapters. Every function returns a plain ``go.Figure``.

A ``go.Figure`` renders in the static book with no kernel, sliders and frames included; ipywidgets do not. So every
interactive idea is first a ``go.Figure`` here, and :mod:`ttr_edu.viz.widgets` adds live controls for JupyterLab.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
import torch

from ttr_edu import hebbian
from ttr_edu._internal.validation import check_finite, check_real, check_seed

__all__ = ["line_figure", "slider_figure", "heatmap", "recall_scores_figure"]

TEMPLATE = "plotly_white"


def _as_list(values) -> list:
    if isinstance(values, torch.Tensor):
        return values.detach().cpu().tolist()
    return list(values)


def line_figure(
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    *,
    title: str,
    x_title: str,
    y_title: str,
    dashed: Sequence[str] = (),
    log_x: bool = False,
    log_y: bool = False,
    errors: Mapping[str, Sequence[float]] | None = None,
) -> go.Figure:
    """One line per entry of ``series`` against the shared ``x``; names listed in ``dashed`` (predictions) are dashed.

    ``errors`` gives, for some series, the half-length of an error bar at every point (e.g. the standard deviation
    over seeds, with ``series`` holding the means).

    Raises:
        ValueError: a series' length (or an error bar list's) differs from ``x``'s, or ``errors`` names a series that
            is not in ``series``.
    """
    x = _as_list(x)
    errors = dict(errors or {})
    unknown = set(errors) - set(series)
    if unknown:
        raise ValueError(f"errors: names no series: {sorted(unknown)}; the series are {list(series)}")
    figure = go.Figure()
    for name, y in series.items():
        y = _as_list(y)
        if len(y) != len(x):
            raise ValueError(f"series[{name!r}]: expected {len(x)} values (one per x), got {len(y)}")
        error_y = None
        if name in errors:
            bar = _as_list(errors[name])
            if len(bar) != len(x):
                raise ValueError(f"errors[{name!r}]: expected {len(x)} values (one per x), got {len(bar)}")
            error_y = {"type": "data", "array": bar, "visible": True}
        figure.add_trace(
            go.Scatter(
                x=x,
                y=y,
                name=name,
                mode="lines" if name in dashed else "lines+markers",
                line={"dash": "dash"} if name in dashed else {},
                error_y=error_y,
            )
        )
    figure.update_layout(title=title, xaxis_title=x_title, yaxis_title=y_title, template=TEMPLATE)
    if log_x:
        figure.update_xaxes(type="log")
    if log_y:
        figure.update_yaxes(type="log")
    return figure


def heatmap(
    matrix: torch.Tensor, *, title: str = "", x_title: str = "", y_title: str = "", zmid: float | None = 0.0
) -> go.Heatmap:
    """A diverging heatmap trace of a 2-D tensor, centred on ``zmid``.

    A trace has no axes: ``x_title`` and ``y_title`` name the coordinates in the hover label only; give the
    figure its axis titles with ``figure.update_layout(xaxis_title=..., yaxis_title=...)``. Plotly draws row 0 at
    the bottom; set ``yaxis_autorange="reversed"`` on the figure to put it at the top, as
    :func:`recall_scores_figure` does.

    Raises:
        TypeError: ``matrix`` not a tensor or of bool or complex dtype, ``zmid`` not a number or None.
        ValueError: ``matrix`` not 2-D, on the meta device, or with NaN/inf entries; ``zmid`` NaN or inf.
    """
    if not isinstance(matrix, torch.Tensor):
        raise TypeError(f"matrix: expected a 2-D tensor (rows, cols), got {type(matrix).__name__}")
    if matrix.dim() != 2:
        raise ValueError(f"matrix: expected a 2-D tensor (rows, cols), got {tuple(matrix.shape)}")
    if matrix.device.type == "meta":
        raise ValueError("matrix: expected a tensor with values to draw, got a meta tensor")
    if matrix.dtype == torch.bool or matrix.is_complex():
        raise TypeError(f"matrix: expected real numbers to draw as colours, got {matrix.dtype}")
    check_finite("matrix", matrix)
    if zmid is not None:
        check_real("zmid", zmid)
    hover = f"{x_title or 'column'} %{{x}}<br>{y_title or 'row'} %{{y}}<br>value %{{z}}<extra>{title}</extra>"
    return go.Heatmap(
        z=matrix.detach().cpu().double().round(decimals=4).tolist(),
        colorscale="RdBu",
        reversescale=True,
        zmid=zmid,
        name=title,
        hovertemplate=hover,
    )


def slider_figure(
    traces_by_step: Mapping[object, Sequence[go.BaseTraceType]],
    *,
    slider_label: str,
    title: str,
    titles_by_step: Mapping[object, str] | None = None,
    active: int = 0,
    layout_from: go.Figure | None = None,
    annotations_by_step: Mapping[object, Sequence] | None = None,
    **layout,
) -> go.Figure:
    """A figure with a slider that shows one group of traces per step: it works in a static page.

    Every step's traces are added up front and the slider toggles their visibility (plotly.js does that in the
    browser, so no kernel is needed).

    Args:
        traces_by_step: step label -> the traces shown at that step (same count per step is not required).
        slider_label: the slider's prefix, e.g. ``"N = "``.
        title: the figure title; ``titles_by_step`` overrides it per step.
        active: the index of the step shown first.
        layout_from: a figure whose layout (subplot grid, axes, size) the slider figure starts from, for steps whose
            traces come from figures of one grid (a gallery per test image).
        annotations_by_step: step label -> the layout annotations shown at that step (a gallery's captions).
        layout: passed to ``figure.update_layout``.

    Raises:
        ValueError: no steps, or ``active`` out of range.
    """
    steps = list(traces_by_step)
    if not steps:
        raise ValueError("traces_by_step: expected at least one step, got none")
    if not 0 <= active < len(steps):
        raise ValueError(f"active: expected an index in [0, {len(steps) - 1}], got {active}")
    figure = go.Figure(layout=layout_from.layout) if layout_from is not None else go.Figure()
    owner = []  # owner[i] = the step index of trace i
    for index, step in enumerate(steps):
        for trace in traces_by_step[step]:
            trace.visible = index == active
            figure.add_trace(trace)
            owner.append(index)
    titles = titles_by_step or {}
    slider_steps = [
        {
            "label": str(step),
            "method": "update",
            # "title.text", not "title": plotly.js 3+ (JupyterLab's plotly) drops a title set as a bare string
            "args": [
                {"visible": [o == index for o in owner]},
                {"title.text": titles.get(step, title)}
                | ({"annotations": list(annotations_by_step[step])} if annotations_by_step else {}),
            ],
        }
        for index, step in enumerate(steps)
    ]
    # Below an x-axis title the slider's current-value label would sit on the title: move the slider further down.
    x_title = layout.get("xaxis_title") or (layout.get("xaxis") or {}).get("title")
    x_title = x_title or (layout_from is not None and layout_from.layout.xaxis.title.text)
    if annotations_by_step:
        figure.update_layout(annotations=list(annotations_by_step[steps[active]]))
    figure.update_layout(
        title=titles.get(steps[active], title),
        template=TEMPLATE,
        sliders=[
            {
                "active": active,
                "currentvalue": {"prefix": slider_label},
                "steps": slider_steps,
                "pad": {"t": 70 if x_title else 20},
            }
        ],
        **layout,
    )
    return figure


def recall_scores_figure(n: int, d: int, *, seed: int = 0) -> go.Figure:
    """Heatmap of ``v_iᵀ (W k_j)`` for ``n`` random unit pairs in ``d`` dims, with the recall accuracy in the title.

    The diagonal is the signal (≈ 1), everything else is crosstalk; recall fails where an off-diagonal entry of a
    column beats its diagonal.
    """
    check_seed("seed", seed)
    check_seed("seed", seed + 1)  # the values' seed
    keys = hebbian.random_unit_keys(n, d, seed=seed)
    values = hebbian.random_unit_keys(n, d, seed=seed + 1)
    W = hebbian.store(keys, values)
    scores = hebbian.recall(W, keys) @ values.T  # (N, N): row j = retrieved value j against every stored value
    accuracy = hebbian.recall_accuracy(W, keys, values)
    figure = go.Figure(heatmap(scores.T, title="score", x_title="query j", y_title="stored value i"))
    figure.update_layout(
        title=f"N = {n} pairs in d = {d}: recall accuracy {accuracy:.0%}",
        xaxis_title="query j (stored key)",
        yaxis_title="stored value i",
        yaxis_autorange="reversed",
        template=TEMPLATE,
        width=520,
        height=480,
    )
    return figure
