"""Plotly figures for chapter 05 (the dual form): spotlight galleries, sorted scores, tables and bars.

Every function returns a plain ``go.Figure``, which renders in the static book with no kernel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from ttr_edu._internal.validation import Dims, check_finite, check_positive_int, check_tensor

__all__ = ["sorted_scores_figure", "spotlight_figure", "table_figure"]

TEMPLATE = "plotly_white"


def _image_trace(image: torch.Tensor, image_shape: tuple[int, int], name: str = "image") -> go.Heatmap:
    h, w = image_shape
    if image.numel() != h * w:
        raise ValueError(f"{name}: expected {h * w} pixels for image_shape {image_shape}, got {tuple(image.shape)}")
    return go.Heatmap(
        z=image.detach().reshape(h, w).cpu().tolist(),
        colorscale="gray_r",
        showscale=False,
        zmin=0.0,
        zmax=1.0,
        hoverinfo="skip",
    )


def _check_image(name: str, image) -> None:
    """A floating tensor with values (not on the meta device), every pixel finite."""
    check_tensor(name, image)
    if image.device.type == "meta":
        raise ValueError(f"{name}: expected a tensor with values to draw, got a meta tensor")
    check_finite(name, image)


def spotlight_figure(
    test_image: torch.Tensor,
    rows: Mapping[str, tuple[torch.Tensor, Sequence[str]]],
    *,
    image_shape: tuple[int, int],
    title: str = "",
) -> go.Figure:
    """A gallery: per row (one per layer), the test image, then its top training images with captions.

    Args:
        test_image: ``(D,)`` pixels in ``[0, 1]``.
        rows: layer name -> (``(k, D)`` training images, k captions such as ``"3 · step 41"``).
        image_shape: ``(H, W)``.

    Raises:
        TypeError: a non-tensor or non-floating image, ``rows`` not a mapping of (images, captions) pairs,
            ``image_shape`` not a pair of ints.
        ValueError: no rows, rows of different k, a caption count that differs from k, images of the wrong size, on
            the meta device, or with NaN/inf pixels.
    """
    if not (isinstance(image_shape, tuple) and len(image_shape) == 2):
        raise TypeError(f"image_shape: expected a pair (H, W) of positive ints, got {image_shape!r}")
    for i, side in enumerate(image_shape):
        check_positive_int(f"image_shape[{i}]", side)
    _check_image("test_image", test_image)
    if not isinstance(rows, Mapping):
        raise TypeError(f"rows: expected a dict layer name -> (images, captions), got {type(rows).__name__}")
    if not rows:
        raise ValueError("rows: expected at least one row, got an empty dict")
    for name, row in rows.items():
        if not (isinstance(row, (tuple, list)) and len(row) == 2):
            raise TypeError(f"rows[{name!r}]: expected a pair (images (k, D), captions), got {type(row).__name__}")
        _check_image(f"rows[{name!r}]", row[0])
    ks = {images.shape[0] for images, _ in rows.values()}
    if len(ks) != 1:
        raise ValueError(f"rows: expected the same number of images in every row, got {sorted(ks)}")
    k = ks.pop()
    titles = []
    for name, (_images, captions) in rows.items():
        if len(captions) != k:
            raise ValueError(f"rows[{name!r}]: expected {k} captions, got {len(captions)}")
        titles += [f"test · {name}"] + list(captions)
    figure = make_subplots(
        rows=len(rows), cols=k + 1, subplot_titles=titles, horizontal_spacing=0.01, vertical_spacing=0.08
    )
    for r, (name, (images, _)) in enumerate(rows.items(), start=1):
        figure.add_trace(_image_trace(test_image, image_shape, "test_image"), row=r, col=1)
        for c in range(k):
            figure.add_trace(_image_trace(images[c], image_shape, f"rows[{name!r}]"), row=r, col=c + 2)
    figure.update_xaxes(visible=False)
    figure.update_yaxes(visible=False, autorange="reversed", scaleanchor="x", constrain="domain")
    figure.update_annotations(font_size=10)
    figure.update_layout(
        title=title,
        template=TEMPLATE,
        height=150 * len(rows) + 80,
        width=110 * (k + 1) + 60,
        margin={"l": 20, "r": 20, "t": 80, "b": 20},
    )
    return figure


def sorted_scores_figure(
    scores: torch.Tensor, labels: torch.Tensor, *, title: str = "", top: int | None = None
) -> go.Figure:
    """Spotlight scores of the stored patterns, sorted high to low, one colour per label.

    Args:
        scores: ``(N,)``. labels: ``(N,)`` integers. top: show only the ``top`` highest (default: all).

    Raises:
        TypeError: ``scores`` not a floating tensor, ``labels`` not an integer tensor, ``top`` not an int or None.
        ValueError: ``scores`` and ``labels`` not ``(N,)`` of one length, on the meta device, NaN/inf scores,
            ``top < 1``.
    """
    dims = Dims()
    dims.bind("scores", scores, ("N",))
    _check_image("scores", scores)
    if not isinstance(labels, torch.Tensor) or labels.is_floating_point() or labels.is_complex():
        raise TypeError(f"labels: expected an integer tensor (N,), got {getattr(labels, 'dtype', type(labels))}")
    if labels.dtype == torch.bool:
        raise TypeError("labels: expected an integer tensor (N,), got torch.bool")
    if tuple(labels.shape) != (dims["N"],):
        raise ValueError(f"labels: expected shape (N,) = ({dims['N']},) (set by scores), got {tuple(labels.shape)}")
    if labels.device != scores.device:
        raise ValueError(f"labels: expected a tensor on {scores.device} (the device of scores), got {labels.device}")
    if top is not None:
        check_positive_int("top", top)
    order = scores.argsort(descending=True)[:top]
    rank = torch.arange(len(order))
    sorted_scores, sorted_labels = scores[order].cpu(), labels[order].cpu()
    figure = go.Figure()
    for label in sorted(set(sorted_labels.tolist())):
        mask = sorted_labels == label
        figure.add_trace(
            go.Scatter(
                x=rank[mask].tolist(),
                y=sorted_scores[mask].tolist(),
                mode="markers",
                marker={"size": 4},
                name=str(label),
            )
        )
    figure.update_layout(
        title=title, xaxis_title="rank", yaxis_title="score |x_tᵀ x|", template=TEMPLATE, legend_title="label"
    )
    return figure


def table_figure(header: Sequence[str], rows: Sequence[Sequence], *, title: str = "") -> go.Figure:
    """A plain table; floats are shown with 3 significant digits.

    Raises:
        ValueError: a row's length differs from the header's.
    """
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"rows: expected {len(header)} cells per row, got {len(row)}: {row!r}")
    cells = [[f"{v:.3g}" if isinstance(v, float) else str(v) for v in column] for column in zip(*rows)]
    figure = go.Figure(
        go.Table(header={"values": list(header), "align": "left"}, cells={"values": cells, "align": "left"})
    )
    figure.update_layout(
        title=title,
        template=TEMPLATE,
        height=60 + 30 * (len(rows) + 1),
        margin={"l": 10, "r": 10, "t": 40 if title else 10, "b": 10},
    )
    return figure
