"""Plotly figures that render in the static book, and ipywidgets add-ons for JupyterLab.

The general figures of :mod:`.figures` are re-exported here (``viz.line_figure``, ``viz.slider_figure``, ...);
:mod:`.chunkwise`, :mod:`.dual_form` and :mod:`.design_space` draw one chapter's pictures each (the last, the
design-space explorer's four panels and their static twin); :mod:`.widgets` and :mod:`.explorer` hold the
JupyterLab-only widgets (each follows a static figure, which the book shows).
"""

from ttr_edu.viz.figures import TEMPLATE, heatmap, line_figure, recall_scores_figure, slider_figure

__all__ = ["TEMPLATE", "line_figure", "slider_figure", "heatmap", "recall_scores_figure"]
