"""slider_figure keeps its title when the slider moves, in JupyterLab's plotly.js as in the book's."""

import plotly.graph_objects as go

from ttr_edu.viz import slider_figure


def test_each_step_sets_the_title_text_not_a_bare_title_string():
    """plotly.js 3 and later (JupyterLab's jupyterlab-plotly) drop a layout title given as a bare string, so a
    slider step that relayouts {"title": "..."} blanks the title; {"title.text": "..."} works in every version."""
    figure = slider_figure(
        {n: [go.Scatter(x=[0, 1], y=[0, n])] for n in (16, 128)},
        slider_label="N = ",
        title="pairs",
        titles_by_step={16: "N = 16: recall 100%", 128: "N = 128: recall 47%"},
    )
    steps = figure.layout.sliders[0].steps
    assert [step.args[1] for step in steps] == [
        {"title.text": "N = 16: recall 100%"},
        {"title.text": "N = 128: recall 47%"},
    ]
    assert figure.layout.title.text == "N = 16: recall 100%"
    assert [step.args[0]["visible"] for step in steps] == [[True, False], [False, True]]


def test_the_slider_sits_below_an_x_axis_title():
    # Its current-value label ("x = N / d²") sat on chapter 01's x-axis title; with a title the slider moves down.
    steps = {name: [go.Scatter(x=[1, 2], y=[1, 2])] for name in ("a", "b")}
    titled = slider_figure(steps, slider_label="x = ", title="t", xaxis_title="N / d")
    plain = slider_figure(steps, slider_label="x = ", title="t")
    assert titled.layout.sliders[0].pad.t >= 60 > plain.layout.sliders[0].pad.t
    titled_dict = slider_figure(steps, slider_label="x = ", title="t", xaxis={"title": {"text": "N / d"}})
    assert titled_dict.layout.sliders[0].pad.t >= 60


def test_a_gallery_per_step_keeps_its_grid_and_captions():
    from plotly.subplots import make_subplots

    galleries = {}
    for label in ("image 0", "image 7"):
        gallery = make_subplots(rows=1, cols=2, subplot_titles=[f"{label} · test", f"{label} · nearest"])
        gallery.add_heatmap(z=[[0, 1]], row=1, col=1)
        gallery.add_heatmap(z=[[1, 0]], row=1, col=2)
        galleries[label] = gallery
    captions = {label: g.layout.annotations for label, g in galleries.items()}
    figure = slider_figure(
        {label: list(g.data) for label, g in galleries.items()},
        slider_label="",
        title="",
        active=1,
        layout_from=galleries["image 0"],
        annotations_by_step=captions,
    )
    assert [trace.xaxis for trace in figure.data] == ["x", "x2", "x", "x2"]
    assert [a.text for a in figure.layout.annotations] == ["image 7 · test", "image 7 · nearest"]
    first = figure.layout.sliders[0].steps[0].args[1]["annotations"]
    assert [a["text"] if isinstance(a, dict) else a.text for a in first] == ["image 0 · test", "image 0 · nearest"]
