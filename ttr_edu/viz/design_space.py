"""The design-space explorer's figure: one point's diagnostics in four panels, and its static twin for the book.

Both draw the entries of :mod:`ttr_edu.experiments.design_space` (one point's streaming error and recall, mean and
range over seeds, and its cost) in the same four panels: the streaming error against ``t``, the recall against
``N``, the point on the cost frontier (state against FLOPs per token, every valid point of the grid in grey), and a
text panel (which layer this is, its update rule, the named layers one choice away, the chunkwise form).

:func:`point_figure` draws one point (and, faintly, the previous one) for the live explorer of JupyterLab.
:func:`static_explorer` draws every point of the shipped grid in one figure with three dropdowns, one per axis, so a
reader of the static book moves through the same space. A dropdown's button can only set fixed properties, never
read the other dropdowns; so each dropdown owns one property of every trace and annotation (the weights menu their
visibility, the function-class menu their opacity, the optimiser menu their line width, marker opacity and fill
colour or font colour) and a point shows only where all three agree. plotly.js applies this in the browser: no kernel.
"""

from __future__ import annotations

import textwrap

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ttr_edu.regression.cost import cost
from ttr_edu.regression.design_space import AXES, CHOICES, Point, identify, named_point, neighbours
from ttr_edu.regression.update_rule import update_rule
from ttr_edu.viz.figures import TEMPLATE

__all__ = ["point_of", "point_text", "point_figure", "static_explorer", "frontier_costs"]

COLOUR = "#1f77b4"
BAND = "rgba(31,119,180,0.2)"
GHOST = "#9a9a9a"
GHOST_BAND = "rgba(154,154,154,0.15)"
CLEAR = "rgba(0,0,0,0)"
TEXT = "#222222"
MENU_Y = 1.1  # the static explorer's menus hang from here (paper coordinates); each axis's name stands on it
AXIS_LABELS = {"weights": "weights", "function_class": "function class", "optimizer": "optimiser"}


def point_of(entry: dict) -> Point:
    """The :class:`~ttr_edu.regression.design_space.Point` an entry of the diagnostics describes."""
    return Point.of(entry["weights"], entry["function_class"], entry["optimizer"], **entry["params"])


def _wrap(line: str, width: int = 74) -> list[str]:
    return textwrap.wrap(line, width, subsequent_indent="    ", break_on_hyphens=False) or [""]


def point_text(entry: dict) -> str:
    """The text panel of a point, as plotly annotation HTML: its identity, its rule, its neighbours, its cost."""
    point = point_of(entry)
    lines = [f"<b>{point.describe()}</b>"]
    if entry.get("problem"):
        # one sentence, with the space that the line break alone would not give a text reader (r38c's F6)
        first, *rest = _wrap(f"No layer here. {entry['problem']}")
        return "<br>".join([*lines, first.replace("No layer here.", "<b>No layer here.</b>", 1), *rest])
    lines += [f"<b>{part}</b>" for part in _wrap(identify(point).sentence())]
    for line in update_rule(point).text().splitlines():
        lines += _wrap(line)
    near = neighbours(point)
    if near:
        lines += _wrap("One choice away: " + ", ".join(f"{n.label} ({AXIS_LABELS[n.axis]})" for n in near) + ".")
    if entry.get("diverged"):
        lines += _wrap(f"Diverged at these parameters ({entry['diverged']}): try a smaller step β.")
    if entry.get("cost"):
        c = entry["cost"]["recall"]
        grows = " (grows with t)" if c["grows"] else ""
        chunk = c["chunkwise"] or "none known"
        lines += _wrap(
            f"Cost per head at D = 16, t = 64: state {c['state']:,} floats{grows}; {c['flops']:,} FLOPs per token."
        )
        lines += _wrap(
            f"Chunkwise: {chunk}" + (f", ≈{c['chunk_flops']:,} FLOPs per token." if c["chunk_flops"] else ".")
        )
    return "<br>".join(lines)


def frontier_costs(points=None) -> list[tuple[Point, dict]]:
    """Every valid point of the grid (default: each choice at its defaults) with its cost at the recall task's size
    (``D_k = D_v = 16``, ``t = 64``), the cost frontier's grey background."""
    if points is None:
        from itertools import product

        points = [Point.of(*keys) for keys in product(*(CHOICES[axis] for axis in AXES))]
    return [(p, vars(cost(p, 16, 16, t=64))) for p in points if p.problem() is None]


def _panels(settings: dict, frontier: list[tuple[Point, dict]]) -> go.Figure:
    stream, recall = settings["stream"], settings["recall"]
    n_seeds = len(settings["seeds"])
    fig = make_subplots(
        rows=2,
        cols=2,
        row_heights=[0.5, 0.5],
        vertical_spacing=0.14,
        horizontal_spacing=0.09,
        subplot_titles=(
            f"streaming error (the map switches at t = {stream['switch']})",
            f"recall of N pairs, D_k = D_v = {recall['dim']}",
            "cost per head and token (D = 16, t = 64)",
            "",
        ),
    )
    fig.update_xaxes(title_text="token t", row=1, col=1)
    fig.update_yaxes(title_text="error / value energy", type="log", range=[-3.3, 3.1], row=1, col=1)
    fig.update_xaxes(title_text="stored pairs N", row=1, col=2)
    fig.update_yaxes(title_text="fraction recalled", range=[0, 1.05], row=1, col=2)
    fig.update_xaxes(title_text="FLOPs per token (grey: every valid point)", type="log", dtick=1, row=2, col=1)
    fig.update_yaxes(title_text="state (floats)", type="log", dtick=1, row=2, col=1)
    fig.update_xaxes(visible=False, range=[0, 1], row=2, col=2)
    fig.update_yaxes(visible=False, range=[0, 1], row=2, col=2)
    fig.add_vline(x=stream["switch"], line_dash="dot", line_color="grey", row=1, col=1)
    fig.add_vline(x=recall["dim"], line_dash="dot", line_color="grey", row=1, col=2)
    fig.add_annotation(
        x=recall["dim"], y=0.05, text="N = D_k", showarrow=False, xanchor="left", row=1, col=2, font={"size": 10}
    )
    fig.add_scatter(
        x=[c["flops"] for _, c in frontier],
        y=[c["state"] for _, c in frontier],
        mode="markers",
        marker={"color": "#c8c8c8", "size": 7},
        name="every valid point",
        row=2,
        col=1,
    )
    fig.update_layout(
        template=TEMPLATE,
        height=860,
        margin={"t": 120, "r": 20, "l": 60, "b": 40},
        hovermode=False,
        showlegend=False,
        title={"text": f"One point of the design space: mean and range over {n_seeds} seeds", "y": 0.985},
    )
    return fig


def _point_traces(entry: dict, settings: dict, ghost: bool = False) -> list[tuple[dict, str, int, int]]:
    """A point's traces as ``(trace, kind, row, col)``: the stream's band and mean, the recall's band and mean (if it
    has diagnostics), its marker on the cost frontier (if it has a cost), and its text panel."""
    colour = GHOST if ghost else COLOUR
    band = GHOST_BAND if ghost else BAND
    dash = "dash" if ghost else "solid"
    tokens, pairs = settings["stream"]["tokens"], settings["recall"]["pairs"]
    traces = []
    if "stream" in entry:
        for x, summary, col in ((tokens, entry["stream"], 1), (pairs, entry["recall"], 2)):
            fill = {"type": "scatter", "x": list(x) + list(x)[::-1], "y": summary["high"] + summary["low"][::-1]}
            fill.update(fill="toself", fillcolor=band, line={"width": 0}, mode="lines")
            mean = {
                "type": "scatter",
                "x": list(x),
                "y": summary["mean"],
                "mode": "lines+markers" if col == 2 else "lines",
            }
            mean.update(line={"color": colour, "width": 2, "dash": dash}, marker={"color": colour, "size": 6})
            traces += [(fill, "band", 1, col), (mean, "line", 1, col)]
    if entry.get("cost"):
        c = entry["cost"]["recall"]
        symbol = "circle-open" if ghost else "circle"
        marker = {"color": colour, "size": 16, "symbol": symbol, "line": {"width": 2, "color": colour}}
        traces.append(
            (
                {"type": "scatter", "x": [c["flops"]], "y": [c["state"]], "mode": "markers", "marker": marker},
                "marker",
                2,
                1,
            )
        )
    if not ghost:
        text = {"type": "scatter", "x": [0], "y": [1], "mode": "text", "text": [point_text(entry)]}
        text.update(textposition="bottom right", textfont={"size": 11, "color": TEXT}, cliponaxis=False)
        traces.append((text, "text", 2, 2))
    return traces


def _add(fig: go.Figure, traces: list[tuple[dict, str, int, int]]) -> None:
    fig.add_traces([t for t, *_ in traces], rows=[r for _, _, r, _ in traces], cols=[c for *_, c in traces])


def point_figure(entry: dict, settings: dict, previous: dict | None = None, frontier=None) -> go.Figure:
    """The four panels for one point (an entry of :mod:`ttr_edu.experiments.design_space`), with the ``previous``
    point in grey for comparison (the explorer's last point before the latest change)."""
    fig = _panels(settings, frontier_costs() if frontier is None else frontier)
    ghost = [] if previous is None or previous is entry else _point_traces(previous, settings, ghost=True)
    _add(fig, ghost + _point_traces(entry, settings))
    if ghost:
        fig.add_annotation(
            text=f"grey, dashed: {point_of(previous).describe()}",
            xref="paper",
            yref="paper",
            x=0,
            y=1.07,
            xanchor="left",
            showarrow=False,
            font={"size": 10, "color": GHOST},
        )
    return fig


def _key(entry: dict) -> tuple[str, str, str]:
    return entry["weights"], entry["function_class"], entry["optimizer"]


def _channel(axis_index: int, chosen: list[bool], kinds: list[str]) -> dict:
    """The property the menu of axis ``axis_index`` owns, for every point trace: a trace shows where all agree."""
    if axis_index == 0:
        return {"visible": chosen}
    if axis_index == 1:
        return {"opacity": [1 if c else 0 for c in chosen]}
    return {
        "line.width": [2 if c and kind == "line" else 0 for c, kind in zip(chosen, kinds)],
        "marker.opacity": [1 if c else 0 for c in chosen],  # plotly draws a marker of size 0 at its default size
        "fillcolor": [BAND if c and kind == "band" else CLEAR for c, kind in zip(chosen, kinds)],
        "textfont.color": [TEXT if c else CLEAR for c in chosen],
    }


def static_explorer(data: dict, start: str = "deltanet") -> go.Figure:
    """Every point of a precomputed grid (:func:`ttr_edu.experiments.design_space.load_shipped`) in one figure,
    with a dropdown per axis; the named layer ``start`` shows first.

    Raises:
        ValueError: ``start`` is not a named layer, or the grid has no entry for it.
    """
    settings, entries = data["settings"], data["points"]
    frontier = [(point_of(e), e["cost"]["recall"]) for e in entries if e.get("cost")]
    fig = _panels(settings, frontier)
    first = _key(_grid_entry(entries, named_point(start)))
    traces, owners = [], []
    for e in entries:
        for trace in _point_traces(e, settings):
            trace[0]["name"] = " · ".join(_key(e))  # which point a trace draws (legend hidden; read by the tests)
            traces.append(trace)
            owners.append(_key(e))
    kinds = [kind for _, kind, _, _ in traces]
    for axis_index in range(len(AXES)):  # the start: each trace as the three menus would set it
        chosen = [owner[axis_index] == first[axis_index] for owner in owners]
        for name, values in _channel(axis_index, chosen, kinds).items():
            for (trace, *_), value in zip(traces, values):
                *path, leaf = name.split(".")
                target = trace
                for part in path:
                    target = target.setdefault(part, {})
                target[leaf] = value
    start_index = len(fig.data)
    _add(fig, traces)
    indices = list(range(start_index, len(fig.data)))
    menus = []
    for axis_index, axis in enumerate(AXES):
        keys = list(CHOICES[axis])
        buttons = []
        for key in keys:
            chosen = [owner[axis_index] == key for owner in owners]
            props = _channel(axis_index, chosen, kinds)
            buttons.append({"label": CHOICES[axis][key].label, "method": "restyle", "args": [props, indices]})
        menus.append(_menu(buttons, keys.index(first[axis_index]), 0.25 * axis_index))
        fig.add_annotation(
            text=AXIS_LABELS[axis],
            xref="paper",
            yref="paper",
            x=0.25 * axis_index,
            y=MENU_Y,
            xanchor="left",
            yanchor="bottom",  # the name sits on the menu's top edge, above it: the menu's box covers no letter
            yshift=3,
            showarrow=False,
            font={"size": 11, "color": "#555555"},
        )
    fig.update_layout(updatemenus=menus, title={"text": "The design space, precomputed: one choice per axis"})
    return fig


def _menu(buttons: list, active: int, x: float) -> dict:
    return {
        "buttons": buttons,
        "active": active,
        "direction": "down",
        "showactive": True,
        "x": x,
        "xanchor": "left",
        "y": MENU_Y,
        "yanchor": "top",
    }


def _grid_entry(entries: list[dict], point: Point) -> dict:
    key = (point.weights, point.function_class, point.optimizer)
    for e in entries:
        if _key(e) == key:
            return e
    raise ValueError(f"start: the grid has no entry for {point.describe()}")
