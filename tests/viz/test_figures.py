"""viz.line_figure: one trace per series, optional error bars (the spread over seeds)."""

import pytest

from ttr_edu import viz


def test_line_figure_draws_error_bars_for_the_series_that_have_them():
    figure = viz.line_figure(
        [1, 2, 3],
        {"mean": [1.0, 2.0, 3.0], "other": [0.0, 1.0, 0.0]},
        errors={"mean": [0.1, 0.2, 0.3]},
        title="t",
        x_title="x",
        y_title="y",
    )
    by_name = {trace.name: trace for trace in figure.data}
    assert list(by_name["mean"].error_y.array) == [0.1, 0.2, 0.3]
    assert by_name["other"].error_y.array is None


def test_line_figure_refuses_error_bars_of_the_wrong_length_or_series():
    with pytest.raises(ValueError, match=r"errors\['a'\]: expected 2 values"):
        viz.line_figure([1, 2], {"a": [1, 2]}, errors={"a": [0.1]}, title="", x_title="", y_title="")
    with pytest.raises(ValueError, match="names no series"):
        viz.line_figure([1, 2], {"a": [1, 2]}, errors={"b": [0.1, 0.1]}, title="", x_title="", y_title="")
