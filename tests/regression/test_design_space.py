"""The design space as a catalogue: every named layer is a point labelled as itself, every identity the catalogue
states holds numerically, and its update rules and costs are composed from the choices."""

import itertools
import math

import pytest
import torch

from tests.helpers import relative_error
from ttr_edu import layers, ops
from ttr_edu.regression import (
    NAMED_LAYERS,
    ExactSolve,
    LocalConstant,
    TestTimeRegression,
    Uniform,
    named_layer,
)
from ttr_edu.regression.cost import cost, matched_hidden
from ttr_edu.regression.design_space import (
    AXES,
    CHOICES,
    LAYER_LABELS,
    PARAMS,
    Point,
    identify,
    named_point,
    neighbours,
)
from ttr_edu.regression.update_rule import update_rule

ALL = [Point.of(*keys) for keys in itertools.product(*(CHOICES[axis] for axis in AXES))]


@pytest.mark.parametrize("name", list(NAMED_LAYERS))
def test_every_named_layer_is_a_point_labelled_as_itself(name):
    point = named_point(name)
    assert point.problem() is None
    assert point.named() == name
    assert identify(point).name == name
    assert identify(point).sentence().startswith("This is ")
    assert tuple(type(x) for x in point.objects()) == NAMED_LAYERS[name]


def test_the_catalogue_counts_its_points_and_says_why_the_others_make_no_layer():
    valid = [p for p in ALL if p.problem() is None]
    assert len(ALL) == 4 * 5 * 9
    assert len(valid) == 50
    for p in ALL:
        if p.problem() is not None:  # the reason is the framework's own message, naming the argument
            assert p.problem().split(":")[0] in ("optimizer", "weights")
            with pytest.raises(ValueError):
                p.layer()


def test_neighbours_differ_in_exactly_one_choice_and_are_named():
    for point in ALL:
        for n in neighbours(point):
            other = point.replace(n.axis, n.key)
            assert other.named() == n.name
            assert sum(getattr(point, a) != getattr(other, a) for a in AXES) == 1
    near = {n.name for n in neighbours(named_point("deltanet"))}
    assert near == {"gated_deltanet", "linear_attention", "longhorn", "deltaproduct", "ttt_linear", "rls"}


def test_points_are_built_from_names_and_defaults_and_refuse_unknown_ones():
    p = Point.of("uniform", "linear", "online_sgd", beta=0.25, ridge=3.0)  # ridge: no choice of this point takes it
    assert p.params == (("beta", 0.25),)
    assert Point.of("uniform", "mlp", "online_sgd").param("beta") == 0.1  # the MLP's own default step
    assert p.replace("function_class", "mlp").param("beta") == 0.25  # a value set by hand is kept
    assert Point.of("uniform", "mlp", "online_sgd").replace("function_class", "linear").param("beta") == 0.5
    assert p.replace("weights", "window").param("window") == PARAMS["window"].default
    with pytest.raises(ValueError, match="^weights: unknown choice 'sliding'"):
        Point.of("sliding", "linear", "online_sgd")
    with pytest.raises(ValueError, match="^step: unknown parameter"):
        Point.of("uniform", "linear", "online_sgd", step=1)
    with pytest.raises(ValueError, match="^name: unknown layer"):
        named_point("mamba")
    with pytest.raises(TypeError, match="^point: "):
        identify(("uniform", "linear", "online_sgd"))


def test_a_new_choice_starts_from_its_own_defaults():
    """A browser test found: from DeltaNet the function class "two-layer MLP" took DeltaNet's β = 0.5, where the MLP's
    steps diverge, not the MLP's own β = 0.1 (the point the book's static explorer shows for the same three
    choices)."""
    mlp = named_point("deltanet").replace("function_class", "mlp")
    assert mlp == Point.of("uniform", "mlp", "online_sgd") and mlp.param("beta") == 0.1
    assert named_point("ttt_linear").replace("function_class", "mlp") == named_point("ttt_mlp")
    assert named_point("ttt_mlp").replace("function_class", "linear") == named_point("ttt_linear")
    for point in ALL:  # from any point at its defaults, one change lands on the new point at its defaults
        for axis in AXES:
            for key in CHOICES[axis]:
                keys = {a: getattr(point, a) for a in AXES} | {axis: key}
                assert point.replace(axis, key) == Point.of(keys["weights"], keys["function_class"], keys["optimizer"])
    hand = Point.of("uniform", "linear", "online_sgd", beta=1.0)  # a value set by hand is kept, even where it diverges
    assert hand.replace("function_class", "mlp").param("beta") == 1.0
    assert mlp.replace(beta=0.05).param("beta") == 0.05  # a parameter given to replace wins


def test_a_parameter_that_does_nothing_at_a_point_is_neither_taken_nor_printed(data):
    """A browser test found: softmax attention inverts nothing, so the exact solve's λ changes none of its outputs and
    named_layer refuses one; its point takes no λ and does not print one. Where a class does invert (local linear,
    kernel ridge), λ changes the outputs and stays."""
    q, k, v, _ = data
    softmax = named_point("softmax_attention")
    assert "ridge" not in softmax.used() and "λ" not in softmax.describe()
    assert Point.of("uniform", "kernel_smoother", "exact_solve", ridge=0.001) == softmax
    with pytest.raises(ValueError, match="^ridge: softmax_attention inverts nothing"):
        named_layer("softmax_attention", ridge=0.1)
    smoother = [
        TestTimeRegression(Uniform(), LocalConstant(), ExactSolve(ridge=r))(q, k, v, scale=2.0)[0] for r in (1e-3, 1.0)
    ]
    assert torch.equal(smoother[0], smoother[1]) and torch.equal(softmax.layer()(q, k, v, scale=2.0)[0], smoother[0])
    for name in ("local_linear_attention", "kernel_ridge"):
        point = named_point(name)
        assert "ridge" in point.used() and f"λ = {point.param('ridge')}" in point.describe()
        small, large = (point.replace(ridge=r).layer()(q, k, v, scale=2.0)[0] for r in (1e-3, 1.0))
        assert relative_error(small, large) > 1e-3
    for point in ALL:  # λ is printed exactly where the point takes it
        assert ("λ =" in point.describe()) == ("ridge" in point.used())


@pytest.mark.parametrize("name", ["softmax_attention", "local_linear_attention"])
def test_the_gaussian_kernel_is_a_point_of_its_own_equal_to_softmax_on_keys_of_one_norm(name, data):
    """A browser test found: the Gaussian kernel smoother was labelled "This is softmax attention." with no reason. It
    is its own point; identify says that on keys of one norm it computes the softmax layer, which holds (for any
    queries and weights) and fails on keys of other norms."""
    q, k, v, _ = data
    softmax = named_point(name)
    gaussian = softmax.replace(kernel="gaussian")
    identity = identify(gaussian)
    assert gaussian.named() is None and identity.name is None and identity.occupied is None
    assert identity.sentence().startswith("No named layer sits here. On keys of one norm")
    assert f"it computes {LAYER_LABELS[name]} exactly" in identity.sentence()
    g = -torch.rand(q.shape[:-1], generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for weights in ("uniform", "gates"):
        a, b = softmax.replace("weights", weights), gaussian.replace("weights", weights)
        assert relative_error(_run(a, q, 1.7 * k, v, g=g, scale=2.0), _run(b, q, 1.7 * k, v, g=g, scale=2.0)) < 1e-12
        norms = torch.linspace(0.5, 1.5, k.shape[1], dtype=torch.float64)[None, :, None, None]
        assert relative_error(_run(a, q, norms * k, v, g=g, scale=2.0), _run(b, q, norms * k, v, g=g, scale=2.0)) > 1e-3
    other = identify(gaussian.replace("weights", "decay")).sentence()
    assert other.startswith("No named layer") and "this point with κ = softmax" in other
    with pytest.raises(ValueError, match="^kernel: "):
        named_point(name, kernel="gaussian")


# -- each identity identify() states, checked on random inputs --------------------------------------------------------


def _run(point, q, k, v, beta=None, g=None, rows=1, **extra):
    kw = dict(extra)
    if point.optimizer in ("online_sgd", "implicit_step", "steps_per_token", "mini_batch_gd", "momentum"):
        kw["beta"] = beta.repeat_interleave(rows, 1) if rows > 1 else beta
    if point.weights == "gates":
        kw["g"] = g
    if rows > 1:
        k, v = k.repeat_interleave(rows, 1), v.repeat_interleave(rows, 1)
    return point.layer()(q, k, v, **kw)[0]


@pytest.fixture
def data():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 9, 2, 4, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 9, 2, 4, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 9, 2, 3, generator=gen, dtype=torch.float64)
    beta = 0.1 + 0.5 * torch.rand(2, 9, 2, generator=gen, dtype=torch.float64)
    return q, ops.l2_norm(k), v, beta


def test_exponential_decay_is_the_gated_layer_with_a_constant_gate(data):
    q, k, v, beta = data
    for optimizer in ("gradient_step", "online_sgd", "exact_solve", "steps_per_token"):
        decay = Point.of("decay", "linear", optimizer, gamma=0.9)
        gated = decay.replace("weights", "gates")
        g = torch.full(beta.shape, math.log(0.9), dtype=torch.float64)
        rows = 2 if optimizer == "steps_per_token" else 1
        assert relative_error(_run(decay, q, k, v, beta, rows=rows), _run(gated, q, k, v, beta, g, rows=rows)) < 1e-12
        assert "constant gate" in identify(decay).sentence() and identify(decay).same_as == gated.named()


def test_the_reductions_identify_states_hold(data):
    q, k, v, beta = data
    deltanet = _run(named_point("deltanet"), q, k, v, beta)
    for point, rows in (
        (Point.of("uniform", "linear", "steps_per_token", steps=1), 1),
        (Point.of("uniform", "linear", "mini_batch_gd", mini_batch_size=1), 1),
        (Point.of("uniform", "linear", "momentum", eta=0.0, alpha=0.0), 1),
    ):
        assert "DeltaNet" in identify(point).sentence()
        assert relative_error(_run(point, q, k, v, beta, rows=rows), deltanet) < 1e-12
    exact = Point.of("uniform", "linear", "exact_solve", ridge=0.5)
    assert "RLS" in identify(exact).sentence()
    assert relative_error(_run(exact, q, k, v), _run(exact.replace("optimizer", "rls", ridge=0.5), q, k, v)) < 1e-10
    cg = Point.of("uniform", "linear", "conjugate_gradient", cg_steps=2, ridge=0.5)
    g0 = torch.zeros_like(beta)
    assert relative_error(_run(cg, q, k, v), _run(cg.replace("weights", "gates"), q, k, v, g=g0)) < 1e-12
    implicit = Point.of("uniform", "linear", "implicit_step")  # unit keys: the explicit step at β/(1 + β)
    assert "β/(1 + β)" in identify(implicit).sentence()
    assert (
        relative_error(_run(implicit, q, k, v, beta), _run(named_point("deltanet"), q, k, v, beta / (1 + beta))) < 1e-12
    )
    assert identify(implicit).same_as == "longhorn"  # itself: DeltaNet only for unit keys
    window = Point.of("window", "linear", "online_sgd", window=9)
    assert "at most w = 9" in identify(window).sentence()
    assert relative_error(_run(window, q, k, v, beta), deltanet) < 1e-12


# -- update rules ------------------------------------------------------------------------------------------------------


def test_update_rules_are_composed_from_the_choices():
    assert "Sₜ = Sₜ₋₁ + βₜ kₜ(vₜ − Sₜ₋₁ᵀkₜ)ᵀ" in update_rule(named_point("deltanet")).text()
    assert "Sₜ = αₜSₜ₋₁ + βₜ kₜ(vₜ − (αₜSₜ₋₁)ᵀkₜ)ᵀ" in update_rule(named_point("gated_deltanet")).text()
    assert "Sₜ = γSₜ₋₁ + kₜvₜᵀ" in update_rule(Point.of("decay", "linear", "gradient_step")).text()
    assert "− k_(t−w)v_(t−w)ᵀ" in update_rule(Point.of("window", "linear", "gradient_step")).text()
    assert "εₜ = βₜ/(1 + βₜ‖kₜ‖²)" in update_rule(named_point("longhorn")).text()
    assert "re-runs the rule below" in update_rule(Point.of("window", "linear", "online_sgd")).text()
    assert "∇ℓ" in update_rule(named_point("titans")).text()
    for point in ALL:
        rule = update_rule(point)
        if point.problem():
            assert rule.problem == point.problem() and not rule.lines
            continue
        latex = rule.latex()
        assert latex.count("{") == latex.count("}") and latex.startswith("$$")
        assert len(rule.text().splitlines()) == len(rule.lines) >= 3


def test_changing_the_weights_changes_only_the_weights_part():
    base = update_rule(named_point("deltanet"))
    decayed = update_rule(named_point("deltanet").replace("weights", "decay"))
    assert base.objective == decayed.objective and base.readout == decayed.readout
    assert base.weights != decayed.weights and base.update != decayed.update


# -- costs -------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,layer",
    [
        ("linear_attention", layers.LinearAttention),
        ("deltanet", layers.DeltaNet),
        ("gated_deltanet", layers.GatedDeltaNet),
        ("mesa", layers.MesaLayer),
        ("longhorn", layers.Longhorn),
        ("deltaproduct", layers.DeltaProduct),
        ("softmax_attention", layers.SoftmaxAttention),
    ],
)
def test_the_state_a_point_keeps_is_the_state_of_its_layer(name, layer):
    hidden, heads, T = 32, 2, 20
    mixer = layer(hidden, heads)
    d = hidden // heads
    assert cost(named_point(name), d, d, t=T).state * heads == mixer.state_size(T)


def test_costs_grow_with_the_work_each_choice_adds():
    base = cost(named_point("deltanet"), 16, 16)
    assert base.state == 256 and base.flops == 6 * 256 and not base.grows
    steps = [cost(Point.of("uniform", "linear", "steps_per_token", steps=n), 16, 16).flops for n in (1, 2, 3)]
    assert steps[1] - steps[0] == steps[2] - steps[1] == 4 * 256
    cg = [cost(Point.of("gates", "linear", "conjugate_gradient", cg_steps=n), 16, 16).flops for n in (1, 2)]
    assert cg[1] - cg[0] == 2 * 16 * 16 + 10 * 16
    assert cost(named_point("rls"), 16, 16).state == 256 + 256
    softmax = [cost(named_point("softmax_attention"), 16, 16, t=t) for t in (10, 20)]
    assert softmax[1].state == 2 * softmax[0].state and softmax[0].grows
    window = cost(Point.of("window", "linear", "online_sgd", window=8), 16, 16, t=64)
    assert window.state == 8 * 32 and window.chunkwise is None
    assert cost(named_point("ttt_mlp"), 16, 16).state >= 2 * 16 * matched_hidden(16, 16)
    assert cost(named_point("gated_deltanet"), 16, 16).chunk_flops is not None
    with pytest.raises(ValueError, match="^point: optimizer"):
        cost(Point.of("uniform", "kernel_smoother", "online_sgd"), 16, 16)
    with pytest.raises(ValueError, match="^d_k: "):
        cost(named_point("deltanet"), 0, 16)


def test_every_valid_point_has_a_cost_and_a_rule():
    for point in ALL:
        if point.problem() is None:
            c = cost(point, 8, 8)
            assert c.state > 0 and c.flops > 0 and "FLOPs/token" in c.summary()
            assert isinstance(point.layer(), TestTimeRegression)


@pytest.mark.parametrize("weights", ["gates", "decay", "uniform"])
def test_rls_objective_renders_the_ridge_its_update_minimises(weights):
    """RLS divides P by the weights' factor, so the ridge written into P₀ = I/λ fades with the data: the rendered
    objective says so where the weights decay (its outputs are the fading-ridge solve, not Mesa's constant ridge),
    and keeps the constant ridge under uniform weights."""
    gen = torch.Generator().manual_seed(38)
    T, D, lam = 12, 4, 0.1
    q, k, v = (torch.randn(1, T, 1, D, generator=gen, dtype=torch.float64) for _ in range(3))
    g = -1.2 * torch.rand(1, T, 1, generator=gen, dtype=torch.float64)
    point = Point.of(weights, "linear", "rls", ridge=lam)
    if weights == "decay":
        g = torch.full_like(g, math.log(point.param("gamma")))
    got = _run(point, q, k, v, g=g, scale=1.0)[0, :, 0]
    log_alpha = g[0, :, 0] if weights != "uniform" else torch.zeros(T, dtype=torch.float64)
    fading, constant = [], []
    for t in range(T):
        gamma = torch.exp(log_alpha[: t + 1].flip(0).cumsum(0).flip(0) - log_alpha[: t + 1])  # γ_i^{(t)}, i = 1..t
        kk, kv = k[0, : t + 1, 0], v[0, : t + 1, 0]
        A, M = (gamma[:, None] * kk).T @ kk, (gamma[:, None] * kk).T @ kv
        ridge0 = lam * torch.exp(log_alpha[: t + 1].sum())  # λ γ_0^{(t)}
        fading.append(torch.linalg.solve(A + ridge0 * torch.eye(D, dtype=torch.float64), M).T @ q[0, t, 0])
        constant.append(torch.linalg.solve(A + lam * torch.eye(D, dtype=torch.float64), M).T @ q[0, t, 0])
    fading, constant = torch.stack(fading), torch.stack(constant)
    rendered = update_rule(point).objective.text
    assert relative_error(got, fading) < 1e-9
    if weights == "uniform":
        assert "γ₀⁽ᵗ⁾" not in rendered and "λ/2‖m‖²" in rendered
    else:
        assert relative_error(got, constant) > 1e-3  # the constant ridge is another objective (Mesa's)
        assert "λ/2·γ₀⁽ᵗ⁾‖m‖²" in rendered and "fades" in rendered
