"""One registry of mixers: every list of mixers in the package is a live view of it, and its specs are checked."""

import pytest
import torch

from ttr_edu.layers import (
    MEMORY_MIXERS,
    MIXERS,
    REGISTRY,
    DeltaNet,
    MixerSpec,
    SoftmaxAttention,
    SpecView,
    register,
    unregister,
)
from ttr_edu.models.lm import LM_MIXERS, TinyLM
from ttr_edu.models.mqar import LINEAR_MEMORIES, MODELS, MQARModel


def test_the_lists_are_views_of_the_one_registry():
    assert list(MIXERS) == [
        "linear_attention",
        "deltanet",
        "gated_deltanet",
        "rls",
        "mesa",
        "softmax_attention",
        "local_linear_attention",
    ]
    assert list(MEMORY_MIXERS) == ["longhorn", "deltaproduct", "ttt_linear", "ttt_mlp", "titans"]
    assert list(MODELS) == list(MIXERS)  # the main MQAR grid trains every layer of chapters 04–07
    assert list(LINEAR_MEMORIES) == ["linear_attention", "deltanet", "gated_deltanet", "rls", "mesa"]
    assert list(LM_MIXERS) == [
        "linear_sumnorm",
        "linear",
        "linear_sumnorm_no_onorm",
        "linear_no_onorm",
        "deltanet",
        "gated_deltanet",
        "softmax",
    ]
    assert all(MIXERS[name] is REGISTRY[name] and MODELS[name] is REGISTRY[name] for name in MIXERS)
    assert all(LM_MIXERS[name][1] is REGISTRY[name] for name in LM_MIXERS)
    assert set(MIXERS) | set(MEMORY_MIXERS) | set(LM_MIXERS) == set(REGISTRY)


def test_a_spec_builds_its_layer_with_its_options_and_yours():
    mesa = MODELS["mesa"](16, 2)
    assert mesa.use_gate and mesa.solver == "exact"
    assert not MODELS["mesa"](16, 2, use_gate=False).use_gate
    linear = LM_MIXERS["linear_sumnorm"][1](16, 2)
    assert linear.sum_norm and linear.feature_map == "elu_plus_one_after_silu"


def test_a_registered_spec_is_in_its_views_at_once_and_leaves_them():
    spec = register(MixerSpec("plain_deltanet", "plain DeltaNet", DeltaNet, {"use_beta": False}, mqar=True, lm=True))
    try:
        assert MIXERS["plain_deltanet"] is spec and MODELS["plain_deltanet"] is spec
        assert LM_MIXERS["plain_deltanet"] == ("plain DeltaNet", spec)
        assert not MQARModel("plain_deltanet", 32, 8).mixer.use_beta
        assert "plain_deltanet" in repr(MIXERS)
    finally:
        unregister("plain_deltanet")
    assert "plain_deltanet" not in MIXERS and "plain_deltanet" not in MODELS and len(MODELS) == 7


def test_register_refuses_a_taken_name_unless_asked_to_replace():
    with pytest.raises(ValueError, match="spec: a mixer named 'deltanet' is registered already"):
        register(MixerSpec("deltanet", "DeltaNet", DeltaNet))
    with pytest.raises(TypeError, match="spec: expected a MixerSpec"):
        register(DeltaNet)
    with pytest.raises(ValueError, match="name: expected one of"):
        unregister("no_such_mixer")
    original = REGISTRY["softmax"]
    replaced = register(MixerSpec("softmax", "softmax", SoftmaxAttention, parametric=False), replace=True)
    try:
        assert REGISTRY["softmax"] is replaced and "softmax" not in LM_MIXERS  # lm=False now
    finally:
        register(original, replace=True)
    assert LM_MIXERS["softmax"][1] is original


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"name": "two words"}, ValueError, "name: expected a Python identifier"),
        ({"label": ""}, TypeError, "label"),
        ({"layer": torch.nn.Linear}, TypeError, "layer: expected a subclass of"),
        ({"options": [1]}, TypeError, "options"),
        ({"parametric": "yes"}, TypeError, "parametric"),
        ({"named_layer": 3}, TypeError, "named_layer"),
        ({"fuzz": {"use_beta": ("boolean", True)}}, ValueError, "fuzz: the recipe of 'use_beta'"),
        ({"family": "other"}, ValueError, "family"),
        ({"mqar": 1}, TypeError, "mqar"),
    ],
)
def test_a_spec_refuses_a_bad_field_by_name(fields, error, message):
    with pytest.raises(error, match=message):
        MixerSpec(**{"name": "x", "label": "x", "layer": DeltaNet, **fields})


def test_a_spec_and_its_options_cannot_change():
    spec = REGISTRY["mesa"]
    with pytest.raises(AttributeError):
        spec.label = "other"
    with pytest.raises(TypeError):
        spec.options["use_gate"] = False


def test_the_parametric_field_says_what_the_mqar_model_passes():
    """A parametric mixer gets the model's feature map; a key-value cache gets none (it takes none)."""
    assert MQARModel("deltanet", 32, 8, feature_map="relu").mixer.feature_map == "relu"
    model = MQARModel("softmax_attention", 32, 8, feature_map="relu")
    assert model.feature_map is None and model.mixer.feature_map is None


def test_every_registered_mixer_builds_a_language_model():
    from ttr_edu.models.lm import LMConfig

    for name in REGISTRY:
        assert TinyLM(LMConfig(mixer=name, d_model=16, num_heads=2, n_layers=1)).num_parameters() > 0, name


def test_a_view_is_read_only():
    view = SpecView(lambda spec: spec.family == "memory", lambda spec: spec.label)
    assert view["titans"] == "Titans" and len(view) == 5
    with pytest.raises(KeyError):
        view["deltanet"]
    with pytest.raises(TypeError):
        view["x"] = 1
