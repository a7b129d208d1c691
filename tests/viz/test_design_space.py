"""The explorer's figures: the static twin's three dropdowns show exactly one point's traces for every choice of
theirs, and the live explorer reaches every named layer and redraws on every control."""

import copy
import itertools

import pytest

import ttr_edu.viz.explorer as explorer_module
from ttr_edu.experiments.design_space import diagnose, entry, load_shipped, settings
from ttr_edu.regression import NAMED_LAYERS
from ttr_edu.regression.design_space import AXES, CHOICES, LAYER_LABELS, Point, named_point
from ttr_edu.viz.design_space import AXIS_LABELS, CLEAR, point_figure, static_explorer
from ttr_edu.viz.explorer import DesignSpaceExplorer


@pytest.fixture(scope="module")
def twin():
    return static_explorer(load_shipped()).to_plotly_json()


def _apply(traces, button):
    """What plotly.js does for a restyle button: per-trace values, on the traces it lists."""
    props, indices = button["args"]
    for name, values in props.items():
        for index, value in zip(indices, values):
            target = traces[index]
            *path, leaf = name.split(".")
            for part in path:
                target = target.setdefault(part, {})
            target[leaf] = value


def _style(trace):
    """What decides whether a trace shows, without its data (cheap to copy)."""
    keep = ("name", "mode", "fill", "fillcolor", "visible", "opacity", "text")
    style = {key: trace[key] for key in keep if key in trace}
    for part in ("line", "marker", "textfont"):
        style[part] = dict(trace.get(part, {}))
    return style


def _shown(trace):
    if trace.get("visible") is False or trace.get("opacity") == 0:
        return False
    kind = trace["mode"]
    if trace.get("fill"):
        return trace["fillcolor"] != CLEAR
    if kind == "text":
        return trace["textfont"]["color"] != CLEAR
    if kind.startswith("lines"):
        return trace["line"]["width"] > 0
    return trace["marker"].get("opacity", 1) > 0


def test_each_choice_of_the_three_dropdowns_shows_exactly_that_points_traces(twin):
    menus = twin["layout"]["updatemenus"]
    assert [[b["label"] for b in m["buttons"]] for m in menus] == [
        [c.label for c in CHOICES[axis].values()] for axis in AXES
    ]
    start = named_point("deltanet")
    assert [m["active"] for m in menus] == [list(CHOICES[a]).index(getattr(start, a)) for a in AXES]
    point_traces = [i for i, t in enumerate(twin["data"]) if t.get("name", "").count(" · ") == 2]
    styles = [_style(t) for t in twin["data"]]
    for keys in itertools.product(*(range(len(CHOICES[a])) for a in AXES)):
        traces = copy.deepcopy(styles)
        for menu, key in zip(menus, keys):
            _apply(traces, menu["buttons"][key])
        want = " · ".join(list(CHOICES[a])[k] for a, k in zip(AXES, keys))
        shown = {traces[i]["name"] for i in point_traces if _shown(traces[i])}
        assert shown == {want}, (want, shown)
        point = Point.of(*want.split(" · "))
        text = [traces[i]["text"][0] for i in point_traces if traces[i]["mode"] == "text" and _shown(traces[i])]
        assert len(text) == 1 and point.describe() in text[0]
        if point.problem() is None:  # stream band and mean, recall band and mean, the cost marker, the text
            assert sum(_shown(traces[i]) for i in point_traces) == 6
        else:
            assert "<b>No layer here.</b> " in text[0]  # a sentence, then the framework's reason: one space


def test_each_menu_name_stands_above_its_menu(twin):
    """A browser test found: the names sat on the menus' top edges, partly covered by the boxes. Each now stands on the
    height its menu hangs from, anchored by its bottom, at the menu's x."""
    menus = twin["layout"]["updatemenus"]
    names = {a["text"]: a for a in twin["layout"]["annotations"] if a["text"] in AXIS_LABELS.values()}
    assert list(names) == [AXIS_LABELS[axis] for axis in AXES]
    for menu, name in zip(menus, names.values()):
        assert menu["yanchor"] == "top" and name["yanchor"] == "bottom"
        assert name["y"] >= menu["y"] and name.get("yshift", 0) >= 0 and name["x"] == menu["x"]


def test_the_start_is_what_the_menus_say(twin):
    shown = {t["name"] for t in twin["data"] if t.get("name", "").count(" · ") == 2 and _shown(t)}
    assert shown == {"uniform · linear · online_sgd"}


def test_the_live_figure_draws_the_point_and_the_previous_one_in_grey():
    current, previous = (entry(diagnose(named_point(n))) for n in ("deltanet", "gated_deltanet"))
    fig = point_figure(current, settings(), previous=previous)
    dashes = [t.line.dash for t in fig.data if t.mode and t.mode.startswith("lines") and t.fill is None]
    assert dashes == ["dash", "dash", "solid", "solid"]
    texts = [t.text[0] for t in fig.data if t.mode == "text"]
    assert len(texts) == 1 and "This is DeltaNet." in texts[0] and "gated DeltaNet (weights)" in texts[0]


@pytest.fixture
def explorer(monkeypatch):
    monkeypatch.setattr(explorer_module, "display", lambda *a, **k: None)  # no kernel to draw in
    return DesignSpaceExplorer()


@pytest.mark.slow
def test_the_explorer_reaches_every_named_layer_and_labels_it(explorer):
    before = explorer.redraws
    for name in NAMED_LAYERS:
        explorer.named.value = name
        assert explorer.point.named() == name
        assert f"This is {LAYER_LABELS[name]}." in explorer.identity.value
        assert [getattr(explorer.point, a) for a in AXES] == [explorer.axes[a].value for a in AXES]
    assert explorer.redraws == before + len(NAMED_LAYERS)  # one redraw per change, none from syncing the controls


def test_every_control_redraws(explorer):
    for axis in AXES:
        for key in CHOICES[axis]:
            before, changed = explorer.redraws, key != getattr(explorer.point, axis)
            explorer.axes[axis].value = key
            assert getattr(explorer.point, axis) == key
            assert explorer.redraws == before + changed
    explorer.go_to("deltanet")
    before = explorer.redraws
    explorer.sliders["beta"].value = 1.0
    assert explorer.point.param("beta") == 1.0 and explorer.redraws == before + 1
    assert explorer.sliders["gamma"].layout.display == "none"  # a parameter this point does not take is hidden


def test_the_explorer_offers_and_prints_only_the_parameters_a_point_takes(monkeypatch):
    """A browser test found: at softmax attention the explorer offered a λ slider that changed nothing and printed
    λ in the title; the Gaussian kernel was labelled softmax attention with no reason; the dropdown row did not
    wrap."""
    shown = []
    monkeypatch.setattr(explorer_module, "display", lambda figure: shown.append(figure))
    explorer = DesignSpaceExplorer("softmax_attention")
    assert explorer.sliders["ridge"].layout.display == "none" and explorer.sliders["kernel"].layout.display is None
    assert "λ" not in shown[-1].layout.title.text and shown[-1].layout.title.text == explorer.point.describe()
    explorer.go_to("local_linear_attention")  # a class that inverts: its λ is offered and printed
    assert explorer.sliders["ridge"].layout.display is None and "λ = " in shown[-1].layout.title.text
    explorer.go_to("softmax_attention")
    explorer.sliders["kernel"].value = "gaussian"
    assert explorer.point.param("kernel") == "gaussian" and explorer.named.value is None
    assert "No named layer sits here. On keys of one norm" in explorer.identity.value
    assert "softmax attention exactly" in explorer.identity.value
    assert explorer.widget.children[0].layout.flex_flow == "row wrap"  # the dropdowns wrap as the sliders do


def test_a_new_function_class_starts_from_its_own_step(explorer):
    """A browser test found: from DeltaNet, "two-layer MLP" kept β = 0.5 and showed no curve (diverged); it takes the
    MLP's own β = 0.1, as the static explorer's point does, and draws."""
    explorer.axes["function_class"].value = "mlp"
    assert explorer.point == Point.of("uniform", "mlp", "online_sgd") and explorer.sliders["beta"].value == 0.1
    assert "Diverged" not in explorer.identity.value and "stream" in explorer.previous


def test_choices_that_make_no_layer_are_marked(explorer):
    explorer.axes["function_class"].value = "kernel_smoother"
    labels = dict((key, label) for label, key in explorer.axes["optimizer"].options)
    assert labels["exact_solve"] == "exact solve" and labels["online_sgd"].endswith("✗")
    assert explorer.identity.value.count("No layer") == 1 and "ExactSolve" in explorer.identity.value  # said once
