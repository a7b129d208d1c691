"""The retrieval model: its memories equal the package's ops, its modes, and its errors."""

import pytest
import torch

from ttr_edu.models.retrieval import RetrievalModel
from ttr_edu.ops import delta_rule_recurrent, linear_attention_recurrent
from ttr_edu.ops.feature_maps import sum_norm
from ttr_edu.tasks.retrieval import capacity_batch, overwrite_batch


def _features(model, batch):
    x = model.embedding(batch.keys)
    phi_k = model.feature_map(model.key_proj(x))
    phi_q = model.feature_map(model.query_proj(model.embedding(batch.query)))
    v = torch.nn.functional.one_hot(batch.values, model.num_values).float()
    return x, phi_k[:, :, None], phi_q[:, None, None], v[:, :, None]


def _read_with_one_more_token(op, state, q, **extra):
    """Read a memory through the op itself: one extra token with a zero key and value writes nothing."""
    zeros_k = torch.zeros_like(q)
    zeros_v = torch.zeros(q.shape[0], 1, 1, state[0].shape[-1] if isinstance(state, tuple) else state.shape[-1])
    o, _ = op(q, zeros_k, zeros_v, scale=1.0, initial_state=state, **extra)
    return o[:, 0, 0]


def test_sum_rule_reads_the_linear_attention_memory():
    torch.manual_seed(0)
    model = RetrievalModel(12, 12, feature_map="dpfp", feature_map_params={"nu": 2})
    batch = capacity_batch(5, 12, generator=torch.Generator().manual_seed(0))
    _, phi_k, phi_q, v = _features(model, batch)
    _, state = linear_attention_recurrent(phi_k, phi_k, v, scale=1.0, normalize=True, output_final_state=True)
    want = _read_with_one_more_token(linear_attention_recurrent, state, phi_q, normalize=True)
    torch.testing.assert_close(model(batch), want, rtol=1e-5, atol=1e-6)


def test_delta_rule_reads_the_delta_rule_memory():
    torch.manual_seed(1)
    model = RetrievalModel(6, 6, feature_map="elu_plus_one", update_rule="delta")
    batch = overwrite_batch(5, 6, generator=torch.Generator().manual_seed(1))
    x, phi_k, phi_q, v = _features(model, batch)
    beta = torch.sigmoid(model.beta_proj(x))
    k_hat = sum_norm(phi_k)
    _, S = delta_rule_recurrent(k_hat, k_hat, v, beta, scale=1.0, output_final_state=True)
    want = _read_with_one_more_token(delta_rule_recurrent, S, sum_norm(phi_q), beta=torch.zeros(5, 1, 1))
    torch.testing.assert_close(model(batch), want, rtol=1e-5, atol=1e-6)


def test_softmax_baseline_weights_every_stored_value():
    torch.manual_seed(2)
    model = RetrievalModel(10, 10, feature_map=None, update_rule="softmax")
    batch = capacity_batch(3, 10)
    y = model(batch)
    assert torch.allclose(y.sum(-1), torch.ones(3))  # a convex mix of one-hot values
    assert model.d_dot is None


def test_one_random_key_is_recalled_exactly_and_nothing_is_trainable():
    model = RetrievalModel(5, 5, feature_map="dpfp", trained_keys=False)
    assert not any(p.requires_grad for p in model.parameters())
    batch = capacity_batch(4, 5, seq_len=1)
    # With one stored pair the normalised read returns its value exactly.
    assert model.loss(batch).item() < 1e-8
    assert model.accuracy(batch) == 1.0


@pytest.mark.parametrize(
    "feature_map, params, expected",
    [("elu_plus_one", {}, 16), ("dpfp", {"nu": 1}, 32), ("dpfp", {"nu": 3}, 96), ("favor_plus", {"m": 16}, 32)],
)
def test_d_dot(feature_map, params, expected):
    assert RetrievalModel(4, 4, feature_map=feature_map, feature_map_params=params).d_dot == expected


def test_favor_plus_redraws_its_features_unless_told_not_to():
    batch = capacity_batch(2, 6, generator=torch.Generator().manual_seed(0))
    redrawn = RetrievalModel(6, 6, feature_map="favor_plus", feature_map_params={"m": 8})
    assert not torch.equal(redrawn(batch), redrawn(batch))
    fixed = RetrievalModel(6, 6, feature_map="favor_plus", feature_map_params={"m": 8, "redraw": False})
    assert torch.equal(fixed(batch), fixed(batch))


def test_favor_plus_keys_and_query_share_one_draw_per_forward_pass():
    # φ(q)·φ(k) estimates exp(q·k) only if keys and query see the same Ω.
    model = RetrievalModel(5, 5, feature_map="favor_plus", feature_map_params={"m": 8})
    seen = []
    model.feature_map.register_forward_pre_hook(lambda module, args: seen.append(module.projection.clone()))
    batch = capacity_batch(2, 5)
    model(batch)
    model(batch)
    assert len(seen) == 4  # keys and query, twice
    assert torch.equal(seen[0], seen[1]) and torch.equal(seen[2], seen[3])
    assert not torch.equal(seen[0], seen[2])


def test_gradients_reach_the_key_projection_and_beta():
    model = RetrievalModel(8, 8, feature_map="dpfp", update_rule="delta")
    model.loss(overwrite_batch(4, 8)).backward()
    for p in (model.key_proj.weight, model.query_proj.weight, model.beta_proj.weight, model.embedding.weight):
        assert p.grad is not None and p.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"update_rule": "hebb"}, "valid rules are sum, delta, softmax"),
        ({"feature_map": "relu6"}, "^feature_map: expected one of .*'dpfp'"),
        ({"feature_map": "dpfp", "update_rule": "softmax"}, "uses no feature map"),
        ({"feature_map": None}, "needs one of"),
        ({"num_keys": 0}, "num_keys"),
    ],
)
def test_bad_settings_are_rejected(kwargs, words):
    arguments = {"num_keys": 4, "num_values": 4, **kwargs}
    with pytest.raises(ValueError, match=words):
        RetrievalModel(arguments.pop("num_keys"), arguments.pop("num_values"), **arguments)


def test_a_batch_from_other_vocabularies_is_rejected():
    model = RetrievalModel(4, 4)
    with pytest.raises(ValueError, match="vocabularies"):
        model(capacity_batch(2, 8))
    with pytest.raises(TypeError, match="RetrievalBatch"):
        model(torch.zeros(2, 4))


def test_retrieval_loss_is_half_the_squared_error_to_the_one_hot_target():
    from ttr_edu.models.retrieval import retrieval_loss

    y = torch.tensor([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    target = torch.tensor([2, 1])
    assert retrieval_loss(y, target).item() == pytest.approx(0.25)  # (0.5 + 0) / 2
    with pytest.raises(ValueError, match="target"):
        retrieval_loss(y, torch.tensor([0, 3]))
    with pytest.raises(TypeError, match="target"):
        retrieval_loss(y, torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="target"):
        retrieval_loss(y, torch.tensor([0, 1, 2]))


def test_a_custom_read_out_drives_the_sum_rule_model():
    from ttr_edu.models.retrieval import sum_rule_retrieve

    calls = []

    def read_out(phi_k, v, phi_q):
        calls.append(phi_k.shape)
        return sum_rule_retrieve(phi_k, v, phi_q)

    torch.manual_seed(0)
    default = RetrievalModel(8, 8, feature_map="elu_plus_one")
    torch.manual_seed(0)
    custom = RetrievalModel(8, 8, feature_map="elu_plus_one", read_out=read_out)
    batch = capacity_batch(3, 8, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(custom(batch), default(batch))
    assert calls == [(3, 8, 16)]
    with pytest.raises(TypeError, match="read_out"):
        RetrievalModel(8, 8, feature_map="elu_plus_one", read_out=3)


def test_sum_rule_retrieve_names_a_mismatched_shape():
    from ttr_edu.models.retrieval import sum_rule_retrieve

    with pytest.raises(ValueError, match="phi_q"):
        sum_rule_retrieve(torch.rand(2, 5, 8), torch.rand(2, 5, 3), torch.rand(2, 7))
