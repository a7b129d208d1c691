"""One name per quantity (release 0.2): every old argument name still works for one release, warns naming the new one
at the caller's line, and gives identical results; old and new together are refused."""

import warnings

import pytest
import torch

from tests.helpers import fla_inputs
from ttr_edu import ops
from ttr_edu._internal.deprecation import renamed_arguments
from ttr_edu.layers import MesaLayer
from ttr_edu.regression import MiniBatchGD, MomentumSGD, StepsPerToken, named_layer

X = fla_inputs(2, 9, 2, 3, 4, seed=1, beta=(0.1, 0.9), max_decay=0.5)
ETA, ALPHA = 0.5 * X["beta"], 0.1 * X["beta"]


def old_and_new(call, old: dict, new: dict, new_name: str):
    """``call(**old)`` warns once, naming ``new_name``, at this file's line; returns both results."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = call(**old)
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == 1, [str(w.message) for w in caught]
    assert f"is now called {new_name!r}" in str(deprecations[0].message)
    assert deprecations[0].filename == __file__  # the user's line, not the package's
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the new name is silent
        want = call(**new)
    return got, want


def same(a, b):
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


CALLS = {
    "rls_recurrent(lam=)": (
        lambda **kw: ops.rls_recurrent(X["q"], X["k"], X["v"], g=X["g"], output_final_state=True, **kw),
        "lam",
        "ridge",
        0.7,
    ),
    "rls_exact(lam=)": (
        lambda **kw: ops.rls_exact(X["q"], X["k"], X["v"], output_final_state=True, **kw),
        "lam",
        "ridge",
        0.7,
    ),
    "titans_recurrent(theta=)": (
        lambda **kw: ops.titans_recurrent(X["q"], X["k"], X["v"], eta=ETA, alpha=ALPHA, **kw),
        "theta",
        "beta",
        X["beta"],
    ),
    "MiniBatchGD(batch_size=)": (MiniBatchGD, "batch_size", "mini_batch_size", 4),
    "StepsPerToken(steps=)": (StepsPerToken, "steps", "num_householder", 3),
    "MomentumSGD(momentum=)": (MomentumSGD, "momentum", "eta", 0.5),
    "MomentumSGD(weight_decay=)": (MomentumSGD, "weight_decay", "alpha", 0.1),
    "named_layer('ttt_linear', batch_size=)": (
        lambda **kw: named_layer("ttt_linear", **kw)(X["q"], X["k"], X["v"], beta=X["beta"]),
        "batch_size",
        "mini_batch_size",
        4,
    ),
    "named_layer('deltaproduct', steps=)": (
        lambda **kw: named_layer("deltaproduct", **kw)(
            X["q"], X["k"].repeat(1, 2, 1, 1), X["v"].repeat(1, 2, 1, 1), beta=X["beta"].repeat(1, 2, 1)
        ),
        "steps",
        "num_householder",
        2,
    ),
}


@pytest.mark.parametrize("name", CALLS)
def test_old_name_warns_and_gives_the_same_result(name):
    call, old, new, value = CALLS[name]
    got, want = old_and_new(call, {old: value}, {new: value}, new)
    assert same(got, want)


@pytest.mark.parametrize("name", CALLS)
def test_old_and_new_together_are_refused(name):
    call, old, new, value = CALLS[name]
    with pytest.raises(TypeError, match=f"got both '{old}' .* and '{new}'"):
        call(**{old: value, new: value})


def test_old_name_with_the_new_one_given_by_position_is_refused():
    with pytest.raises(TypeError, match="got both 'lam'"):
        ops.rls_recurrent(X["q"], X["k"], X["v"], 0.5, lam=0.5)
    with pytest.raises(TypeError, match="got both 'theta'"):
        ops.titans_recurrent(X["q"], X["k"], X["v"], X["beta"], ETA, ALPHA, theta=X["beta"])


@pytest.mark.parametrize(
    ("cls", "old", "new", "value"),
    [(MiniBatchGD, "batch_size", "mini_batch_size", 4), (StepsPerToken, "steps", "num_householder", 3)],
)
def test_old_attribute_reads_the_new_one_with_a_warning(cls, old, new, value):
    obj = cls(**{new: value})
    with pytest.warns(DeprecationWarning, match=f"is now called '{new}'"):
        assert getattr(obj, old) == value


def test_mesa_layer_old_ridge_name():
    """MesaLayer(lam=...) builds the same layer (same parameters, same output) as MesaLayer(ridge=...)."""
    torch.manual_seed(0)
    with pytest.warns(DeprecationWarning, match="'lam' is now called 'ridge'"):
        old = MesaLayer(8, 2, lam=0.3, use_gate=True)
    torch.manual_seed(0)
    new = MesaLayer(8, 2, ridge=0.3, use_gate=True)
    x = torch.randn(2, 6, 8)
    assert torch.equal(old(x), new(x))
    with pytest.warns(DeprecationWarning, match="'lam' is now called 'ridge'"):
        assert new.lam == 0.3
    with pytest.raises(TypeError, match="got both 'lam'"):
        MesaLayer(8, 2, lam=0.3, ridge=0.3)


@pytest.mark.parametrize("form", [ops.rls_recurrent, ops.rls_exact])
def test_input_policy_holds_for_the_old_spelling(form):
    """guarded() checks scalars by name; the rename happens before it, so lam=... is checked as the ridge."""
    q, k, v = (X[name].float() for name in ("q", "k", "v"))
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="^ridge: 1e-300 does not fit"):
        form(q, k, v, lam=1e-300)
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="^ridge: expected a finite number > 0"):
        form(q, k, v, lam=0.0)


def test_renaming_to_a_missing_parameter_is_a_decoration_error():
    with pytest.raises(TypeError, match="has no parameter 'ridge'"):

        @renamed_arguments(lam="ridge")
        def f(q, lam=1.0):
            return q
