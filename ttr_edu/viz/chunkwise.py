"""Plotly figures for the chunkwise algorithms and Triton kernels chapters: which part of the causal T × T matrix a
chunk computes in parallel form and which part reaches it through the state, and which program of a kernel's grid
owns which tile.

Every function returns a plain ``go.Figure`` with a slider (static-book safe: plotly.js toggles the traces).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go
import torch

from ttr_edu._internal.validation import check_allocation, check_positive_int
from ttr_edu.viz.figures import slider_figure

__all__ = ["block_decomposition", "block_decomposition_figure", "tile_owner_map", "tile_map_figure"]

FUTURE, INTRA, STATE = 0, 1, 2  # the three kinds of entry (t, s) of the causal T × T matrix
_KIND_COLOURS = [
    [0.0, "#f2f2f2"],
    [0.33, "#f2f2f2"],
    [0.34, "#d62728"],
    [0.66, "#d62728"],
    [0.67, "#1f77b4"],
    [1.0, "#1f77b4"],
]


def _check_steps(name: str, values, active) -> None:
    """A slider's values: a non-empty list of positive ints, and ``active`` an index into it."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{name}: expected a list of positive ints, got {type(values).__name__}")
    if not values:
        raise ValueError(f"{name}: expected at least one value, got an empty list")
    for i, value in enumerate(values):
        check_positive_int(f"{name}[{i}]", value)
    if isinstance(active, bool) or not isinstance(active, int):
        raise TypeError(f"active: expected an int index into {name}, got {type(active).__name__} {active!r}")
    if not 0 <= active < len(values):
        raise ValueError(f"active: expected an index in [0, {len(values) - 1}], got {active}")


def block_decomposition(T: int, chunk_size: int) -> torch.Tensor:
    """Classify every entry ``(t, s)`` of the causal ``T × T`` matrix for chunks of ``chunk_size`` tokens.

    Returns an int tensor ``(T, T)``: ``FUTURE`` (0) where ``s > t`` (masked), ``INTRA`` (1) where ``s ≤ t`` in the
    same chunk (the diagonal block, computed as ``(Q Kᵀ ⊙ M) V``), ``STATE`` (2) where ``s`` lies in an earlier chunk
    (reaches token ``t`` through the state, ``Q S``). Source: the chunk form of Yang et al. 2024, §3.

    Raises:
        ValueError: ``T`` or ``chunk_size`` is not a positive int, or the map would not fit in memory.
    """
    check_positive_int("T", T)
    check_positive_int("chunk_size", chunk_size)
    check_allocation("T", (T, T), dtype=torch.int64, what="the (T, T) map")
    t = torch.arange(T)
    chunk = t // chunk_size
    causal = t[:, None] >= t[None, :]
    same_chunk = chunk[:, None] == chunk[None, :]
    kind = torch.full((T, T), FUTURE)
    kind[causal & same_chunk] = INTRA
    kind[causal & ~same_chunk] = STATE
    return kind


def block_decomposition_figure(T: int, chunk_sizes: Sequence[int], *, active: int = 0) -> go.Figure:
    """The causal ``T × T`` matrix coloured by :func:`block_decomposition`, with a slider over the chunk size.

    The title of each step counts the entries computed in parallel form (``INTRA``) and through the state
    (``STATE``), and the ``⌈T/C⌉`` sequential state steps.

    Raises:
        TypeError / ValueError: as :func:`block_decomposition`; ``chunk_sizes`` not a non-empty list of positive
            ints; ``active`` not an index into it.
    """
    _check_steps("chunk_sizes", chunk_sizes, active)
    check_positive_int("T", T)
    traces, titles = {}, {}
    for C in chunk_sizes:
        kind = block_decomposition(T, C)
        intra, state = int((kind == INTRA).sum()), int((kind == STATE).sum())
        hover = [
            [
                ["masked (future)", "diagonal block: (Q Kᵀ ⊙ M) V", "earlier chunk: through the state, Q S"][k]
                for k in row
            ]
            for row in kind.tolist()
        ]
        traces[C] = [
            go.Heatmap(
                z=kind.tolist(),
                zmin=0,
                zmax=2,
                colorscale=_KIND_COLOURS,
                showscale=False,
                text=hover,
                hovertemplate="query t %{y}, key s %{x}: %{text}<extra></extra>",
            )
        ]
        titles[C] = (
            f"C = {C}: {math.ceil(T / C)} sequential state steps; {intra} entries in diagonal blocks (red), "
            f"{state} through the state (blue)"
        )
    figure = slider_figure(
        traces,
        slider_label="chunk size C = ",
        title=titles[chunk_sizes[active]],
        titles_by_step=titles,
        active=active,
        height=560,
        xaxis_title="key position s (token)",
        yaxis_title="query position t (token)",
    )
    figure.update_yaxes(autorange="reversed", scaleanchor="x")
    return figure


def tile_owner_map(B: int, H: int, T: int, D_v: int, block_v: int) -> torch.Tensor:
    """Which program of the grid ``(B·H, ⌈D_v / BV⌉)`` writes each output element, for the ``(B, T, H, D_v)`` layout.

    Returns a float tensor ``(B·T, H·⌈D_v/BV⌉·BV)``: row ``b·T + t``, column ``h·(padded D_v) + d``; the value is the
    program's linear index ``i_bh·⌈D_v/BV⌉ + i_v``, and NaN for the masked lanes ``d ≥ D_v`` of the last value block.

    Raises:
        ValueError: a size is not a positive int, or the map would not fit in memory.
    """
    for name, value in (("B", B), ("H", H), ("T", T), ("D_v", D_v), ("block_v", block_v)):
        check_positive_int(name, value)
    n_v = math.ceil(D_v / block_v)
    padded = n_v * block_v
    sizes = {"B": B, "T": T, "H": H, "D_v": D_v, "block_v": block_v}
    check_allocation(max(sizes, key=sizes.get), (B * T, H * padded), what="the (B·T, H·padded D_v) map")
    owner = torch.full((B * T, H * padded), float("nan"))
    for b in range(B):
        for h in range(H):
            for i_v in range(n_v):
                cols = torch.arange(i_v * block_v, min((i_v + 1) * block_v, D_v))
                owner[b * T : (b + 1) * T, h * padded + cols] = float((b * H + h) * n_v + i_v)
    return owner


def tile_map_figure(B: int, H: int, T: int, D_v: int, block_vs: Sequence[int], *, active: int = 0) -> go.Figure:
    """:func:`tile_owner_map` as a heatmap, one colour per program, masked lanes blank, with a slider over BV.

    Raises:
        TypeError / ValueError: as :func:`tile_owner_map`; ``block_vs`` not a non-empty list of positive ints;
            ``active`` not an index into it.
    """
    _check_steps("block_vs", block_vs, active)
    traces, titles = {}, {}
    for block_v in block_vs:
        owner = tile_owner_map(B, H, T, D_v, block_v)
        n_v = math.ceil(D_v / block_v)
        traces[block_v] = [
            go.Heatmap(
                z=owner.tolist(),
                colorscale="Turbo",
                showscale=False,
                hovertemplate="row b·T+t %{y}, column h·D+d %{x}: program %{z}<extra></extra>",
            )
        ]
        titles[block_v] = (
            f"BV = {block_v}: grid ({B * H}, {n_v}) = {B * H * n_v} programs; blank columns are masked "
            f"lanes (d ≥ D_v = {D_v})"
        )
    return slider_figure(
        traces,
        slider_label="value block BV = ",
        title=titles[block_vs[active]],
        titles_by_step=titles,
        active=active,
        height=420,
        xaxis_title="output column h·(padded D_v) + d (element)",
        yaxis_title="output row b·T + t (token)",
    )
