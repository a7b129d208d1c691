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
