"""The design-space explorer for JupyterLab: a dropdown per axis, a slider per parameter, diagnostics redrawn live.

JupyterLab only (ipywidgets need a kernel); the book shows :func:`ttr_edu.viz.design_space.static_explorer`, the same
four panels precomputed. Each change builds the new point (:class:`ttr_edu.regression.design_space.Point`), runs
its diagnostics (:func:`ttr_edu.experiments.design_space.diagnose`, three seeds, well under a second for every point
of the grid on a laptop CPU) and redraws, with the previous point in grey. A choice that makes no layer with the
other two is marked ✗ in its dropdown; picking it shows the framework's reason instead of curves.
"""

from __future__ import annotations

import time

import ipywidgets as widgets
from IPython.display import display

from ttr_edu.experiments.design_space import diagnose, entry, settings
from ttr_edu.regression.design_space import (
    AXES,
    CHOICES,
    LAYER_LABELS,
    PARAMS,
    identify,
    named_point,
    neighbours,
)
from ttr_edu.regression.layer import NAMED_LAYERS
from ttr_edu.regression.update_rule import update_rule
from ttr_edu.viz.design_space import AXIS_LABELS, frontier_costs, point_figure

__all__ = ["DesignSpaceExplorer", "design_space_explorer"]


class DesignSpaceExplorer:
    """The explorer's widgets and state; :attr:`widget` is what a notebook displays.

    Attributes:
        point: the point shown.
        redraws: how many times the diagnostics were drawn; ``seconds`` the last redraw's time (diagnostics and
            figure, in the kernel).
    """

    def __init__(self, start: str = "deltanet") -> None:
        self.point = named_point(start)
        self.previous: dict | None = None
        self.redraws, self.seconds = 0, 0.0
        self._settings, self._frontier = settings(), frontier_costs()
        self._syncing = False
        self.axes = {
            axis: widgets.Dropdown(description=AXIS_LABELS[axis], style={"description_width": "initial"})
            for axis in AXES
        }
        self.named = widgets.Dropdown(
            options=[("(none)", None)] + [(LAYER_LABELS[n], n) for n in NAMED_LAYERS],
            description="named layer",
            style={"description_width": "initial"},
        )
        self.sliders = {
            name: widgets.SelectionSlider(
                options=[(str(v), v) for v in p.values],
                value=p.default,
                description=f"{p.symbol} ({p.label})",
                style={"description_width": "initial"},
                layout=widgets.Layout(width="360px"),
                continuous_update=False,
            )
            for name, p in PARAMS.items()
        }
        self.identity = widgets.HTMLMath()
        self.nearby = widgets.HBox()
        self.status = widgets.HTML()
        self.output = widgets.Output()
        for axis, dropdown in self.axes.items():
            dropdown.observe(lambda change, axis=axis: self._choose(axis, change["new"]), names="value")
        for name, slider in self.sliders.items():
            slider.observe(lambda change, name=name: self._set(name, change["new"]), names="value")
        self.named.observe(lambda change: self._name(change["new"]), names="value")
        self.widget = widgets.VBox(
            [
                # wraps as the sliders do: at common widths the named layer would sit behind a scrollbar
                widgets.HBox([*self.axes.values(), self.named], layout=widgets.Layout(flex_flow="row wrap")),
                widgets.HBox(list(self.sliders.values()), layout=widgets.Layout(flex_flow="row wrap")),
                self.identity,
                self.status,
                self.nearby,
                self.output,
            ]
        )
        self._sync()
        self.redraw()

    # -- changes ------------------------------------------------------------------------------------------------

    def _choose(self, axis: str, key: str) -> None:
        if self._syncing or key == getattr(self.point, axis):
            return
        self.point = self.point.replace(axis, key)
        self._sync()
        self.redraw()

    def _set(self, name: str, value) -> None:
        if self._syncing or name not in self.point.used() or value == self.point.param(name):
            return
        self.point = self.point.replace(**{name: value})
        self._sync()
        self.redraw()

    def _name(self, name: str | None) -> None:
        if not self._syncing and name is not None:
            self.go_to(name)

    def go_to(self, name: str) -> None:
        """Show the named layer ``name`` (a key of ``NAMED_LAYERS``) at its default parameters."""
        self.point = named_point(name)
        self._sync()
        self.redraw()

    def _sync(self) -> None:
        """Put every control in the state of :attr:`point`, without firing their handlers."""
        self._syncing = True
        try:
            for axis, dropdown in self.axes.items():
                options = []
                for key, choice in CHOICES[axis].items():
                    ok = self.point.replace(axis, key).problem() is None
                    options.append((choice.label if ok else f"{choice.label} ✗", key))
                dropdown.options = options
                dropdown.value = getattr(self.point, axis)
            for name, slider in self.sliders.items():
                used = name in self.point.used()
                slider.layout.display = None if used else "none"
                if used:
                    slider.value = self.point.param(name)
            self.named.value = self.point.named()
            self.nearby.children = [self._jump(n) for n in neighbours(self.point)]
        finally:
            self._syncing = False

    def _jump(self, neighbour) -> widgets.Button:
        button = widgets.Button(
            description=f"→ {neighbour.label}",
            tooltip=f"change the {AXIS_LABELS[neighbour.axis]} to {CHOICES[neighbour.axis][neighbour.key].label}",
            layout=widgets.Layout(width="auto"),
        )
        button.on_click(lambda _: self._choose(neighbour.axis, neighbour.key))
        return button

    # -- drawing -------------------------------------------------------------------------------------------------

    def redraw(self) -> None:
        """Run the point's diagnostics and draw them, with the previous point in grey."""
        start = time.perf_counter()
        current = entry(diagnose(self.point))
        figure = point_figure(current, self._settings, previous=self.previous, frontier=self._frontier)
        figure.update_layout(title={"text": self.point.describe()})
        rule = update_rule(self.point)
        if rule.problem is None:
            self.identity.value = f"<b>{identify(self.point).sentence()}</b><br>{rule.latex()}"
        else:  # the rule's text would repeat "No layer": the reason alone follows the head
            self.identity.value = f"<b>No layer here.</b> {rule.problem}"
        with self.output:
            self.output.clear_output(wait=True)
            display(figure)
        self.previous = current if "stream" in current else self.previous
        self.seconds = time.perf_counter() - start
        self.redraws += 1
        near = "one choice away:" if self.nearby.children else "no named layer is one choice away"
        self.status.value = (
            f"<span class='ttr-redraw' data-count='{self.redraws}'>redraw {self.redraws}: diagnostics and figure in "
            f"{self.seconds:.2f} s (kernel)</span> · {near}"
        )


def design_space_explorer(start: str = "deltanet") -> widgets.Widget:
    """The explorer's widget, starting at the named layer ``start``.

    Raises:
        ValueError: ``start`` is not a key of ``NAMED_LAYERS``.
    """
    return DesignSpaceExplorer(start).widget
