"""ipywidgets add-ons for JupyterLab. The static book shows the ``go.Figure`` each one builds on, never these.

Each function returns an ``ipywidgets`` widget whose controls redraw a figure from :mod:`ttr_edu.viz`.
"""

from __future__ import annotations

import ipywidgets as widgets
from IPython.display import display

from ttr_edu.viz.figures import recall_scores_figure

__all__ = ["hebbian_recall_explorer"]


def hebbian_recall_explorer(n_max: int = 256, d_choices: tuple[int, ...] = (8, 16, 32, 64, 128)) -> widgets.Widget:
    """Sliders for the number of stored pairs ``N`` and the key dimension ``d``, redrawing
    :func:`recall_scores_figure`."""
    n_slider = widgets.IntSlider(value=16, min=1, max=n_max, step=1, description="N pairs", continuous_update=False)
    d_picker = widgets.SelectionSlider(options=list(d_choices), value=d_choices[len(d_choices) // 2], description="d")
    seed_box = widgets.IntText(value=0, description="seed")
    output = widgets.Output()

    def redraw(_change=None) -> None:
        with output:
            output.clear_output(wait=True)
            display(recall_scores_figure(n_slider.value, d_picker.value, seed=seed_box.value))

    for control in (n_slider, d_picker, seed_box):
        control.observe(redraw, names="value")
    redraw()
    return widgets.VBox([widgets.HBox([n_slider, d_picker, seed_box]), output])
