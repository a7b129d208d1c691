"""The MQAR generator (Zoology-style), its accuracy metric and the tiny models (the grids: tests/experiments)."""

import pytest
import torch

from ttr_edu.models.mqar import LINEAR_MEMORIES, MODELS, MQARModel
from ttr_edu.tasks.mqar import (
    IGNORE_INDEX,
    filler_key_copies,
    free_slot_fraction,
    mqar_accuracy,
    mqar_batch,
    mqar_layout,
    query_slots,
)


def batch(seed=0, **kw):
    args = dict(batch_size=16, seq_len=64, num_pairs=8, vocab_size=64)
    args.update(kw)
    return mqar_batch(**args, generator=torch.Generator().manual_seed(seed))


def test_context_holds_distinct_keys_and_values_from_disjoint_halves():
    b = batch()
    keys, values = b.inputs[:, 0:16:2], b.inputs[:, 1:16:2]
    assert ((keys >= 1) & (keys < 32)).all() and ((values >= 32) & (values < 64)).all()
    for row in range(16):
        assert len(set(keys[row].tolist())) == 8 and len(set(values[row].tolist())) == 8
    assert (b.labels[:, :16] == IGNORE_INDEX).all()


def test_every_key_is_asked_once_and_labelled_with_its_value():
    b = batch(1)
    for row in range(16):
        stored = dict(zip(b.inputs[row, 0:16:2].tolist(), b.inputs[row, 1:16:2].tolist()))
        asked = (b.labels[row] != IGNORE_INDEX).nonzero()[:, 0]
        assert len(asked) == 8
        assert sorted(b.inputs[row, asked].tolist()) == sorted(stored)  # the query token is the key ...
        for pos in asked.tolist():
            assert b.labels[row, pos].item() == stored[b.inputs[row, pos].item()]  # ... labelled with its value
        assert all((pos - 16) % 2 == 0 for pos in asked.tolist())  # at even offsets after the context


def test_query_gaps_follow_a_power_law_not_a_uniform_law():
    b = batch(2, batch_size=400, seq_len=256, num_pairs=4, vocab_size=64)
    offsets = ((b.labels[:, 8:] != IGNORE_INDEX).nonzero()[:, 1] // 2).double()  # slot index, 0..123
    uniform_mean = (124 - 1) / 2  # mean slot of 4 draws without replacement from a uniform law
    assert offsets.mean() < 0.75 * uniform_mean
    assert (offsets < 10).double().mean() > 0.15  # many queries soon after the context (uniform: ~8%)


def test_fillers_and_reproducibility():
    a, b = batch(3), batch(3)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.labels, b.labels)
    zeros = batch(3, random_non_queries=False)
    tail = zeros.inputs[:, 16:]
    assert ((tail == 0) == (zeros.labels[:, 16:] == IGNORE_INDEX)).all()


def test_bad_sizes_say_what_is_needed():
    with pytest.raises(ValueError, match="seq_len >= 4 \\* num_pairs"):
        mqar_batch(2, 30, 8, 64)
    with pytest.raises(ValueError, match="vocab_size >= 2 \\* \\(num_pairs \\+ 1\\)"):
        mqar_batch(2, 64, 8, 16)
    with pytest.raises(ValueError, match="power_a"):
        mqar_batch(2, 64, 8, 64, power_a=2.0)
    with pytest.raises(TypeError, match="num_pairs"):
        mqar_batch(2, 64, 8.0, 64)


def test_accuracy_counts_labelled_positions_only():
    b = batch(4)
    perfect = torch.nn.functional.one_hot(b.labels.clamp(min=0), 64).double()
    assert mqar_accuracy(perfect, b.labels) == 1.0
    wrong = perfect.roll(1, dims=-1)
    assert mqar_accuracy(wrong, b.labels) == 0.0
    with pytest.raises(ValueError, match="labels"):
        mqar_accuracy(perfect[:, :-1], b.labels)
    with pytest.raises(ValueError, match="no labelled position"):
        mqar_accuracy(perfect, torch.full_like(b.labels, IGNORE_INDEX))


def test_layout_places_what_the_batch_draws_and_names_bad_shapes():
    keys, values = torch.tensor([[3, 5]]), torch.tensor([[40, 41]])
    inputs, labels = mqar_layout(keys, values, torch.tensor([[2, 0]]), 12)
    assert inputs.tolist() == [[3, 40, 5, 41, 5, 0, 0, 0, 3, 0, 0, 0]]
    assert labels.tolist() == [[-100] * 4 + [41, -100, -100, -100, 40, -100, -100, -100]]
    with pytest.raises(ValueError, match="slots: expected values in"):
        mqar_layout(keys, values, torch.tensor([[4, 0]]), 12)
    with pytest.raises(ValueError, match=r"values: expected shape \(B, N\) = \(1, 2\) \(set by keys\), got \(1, 1\)"):
        mqar_layout(keys, values[:, :1], torch.tensor([[2, 0]]), 12)
    with pytest.raises(TypeError, match="keys"):
        mqar_layout(keys.float(), values, torch.tensor([[2, 0]]), 12)
    with pytest.raises(ValueError, match="values: expected tokens >= 0"):
        mqar_layout(keys, -values, torch.tensor([[2, 0]]), 12)
    with pytest.raises(ValueError, match="keys: a meta tensor"):
        mqar_layout(keys.to("meta"), values, torch.tensor([[2, 0]]), 12)
    with pytest.raises(TypeError, match="seq_len"):
        mqar_layout(keys, values, torch.tensor([[2, 0]]), "12")
    with pytest.raises(TypeError, match="filler"):
        mqar_layout(keys, values, torch.tensor([[2, 0]]), 12, torch.zeros(1, 8))


def test_accuracy_and_the_model_refuse_what_they_cannot_score():
    logits, labels = torch.zeros(1, 3, 4), torch.tensor([[-100, 2, -100]])
    with pytest.raises(ValueError, match=r"labels: expected a token in \[0, V\) = \[0, 4\) or -100"):
        mqar_accuracy(logits, torch.tensor([[-100, 4, -100]]))
    with pytest.raises(ValueError, match="logits: expected finite values"):
        mqar_accuracy(logits.index_fill(1, torch.tensor([0]), float("nan")), labels)
    model = MQARModel("deltanet", vocab_size=8, d_model=4)
    with pytest.raises(ValueError, match=r"inputs: expected tokens in \[0, V\) = \[0, 8\), got values from 0 to 8"):
        model(torch.tensor([[0, 8]]))
    with pytest.raises(ValueError, match="inputs: expected shape"):
        model(torch.zeros(0, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="vocab_size: asks for"):
        MQARModel("deltanet", vocab_size=10**13, d_model=4)


def test_free_slots_say_when_every_slot_is_a_query():
    assert query_slots(64, 16) == 16 and free_slot_fraction(64, 16) == 0.0  # T = 4N: a permutation, no gaps
    assert free_slot_fraction(96, 16) == 0.5 and free_slot_fraction(96, 4) == 1 - 4 / 44
    with pytest.raises(ValueError, match="seq_len >= 4"):
        free_slot_fraction(60, 16)


def test_query_slots_refuse_a_sequence_shorter_than_the_context():
    """Reproducer query_slots_impossible_layout: T < 2N used to give 0 slots while free_slot_fraction raised."""
    with pytest.raises(ValueError, match="seq_len: the context of 9 pairs alone needs 2 \\* num_pairs = 18"):
        query_slots(16, 9)
    assert query_slots(18, 9) == 0


def test_layout_refuses_a_repeated_slot():
    """Reproducer mqar_layout_repeated_slot: two keys in one slot silently dropped a query."""
    keys, values = torch.tensor([[1, 2, 3]]), torch.tensor([[11, 12, 13]])
    with pytest.raises(ValueError, match="slots: expected N = 3 distinct slots per example.*example 0 repeats"):
        mqar_layout(keys, values, torch.tensor([[0, 0, 1]]), 16)


def test_filler_copies_of_keys_are_rare_at_zoology_vocabulary_and_common_at_128():
    rates = {
        v: filler_key_copies(mqar_batch(2000, 64, 8, v, generator=torch.Generator().manual_seed(0)))
        for v in (128, 8192)
    }
    assert rates[8192]["sequences"] < 0.06 and rates[8192]["queries"] < 0.005
    assert rates[128]["sequences"] > 0.85 and rates[128]["queries"] > 0.05
    none = mqar_batch(200, 64, 8, 128, random_non_queries=False, generator=torch.Generator().manual_seed(0))
    assert filler_key_copies(none) == {"sequences": 0.0, "queries": 0.0}


def test_filler_key_copies_counts_a_planted_copy():
    keys, values = torch.tensor([[3, 5]]), torch.tensor([[40, 41]])
    filler = torch.zeros(1, 8, dtype=torch.long)
    filler[0, 1] = 3  # a copy of key 3 at tail position 1, before key 3 is asked at tail position 4 (slot 2)
    inputs, labels = mqar_layout(keys, values, torch.tensor([[2, 0]]), 12, filler)
    from ttr_edu.tasks.mqar import MQARBatch

    rates = filler_key_copies(MQARBatch(inputs, labels, 2, 64))
    assert rates == {"sequences": 1.0, "queries": 0.5}


@pytest.mark.parametrize("mixer", list(MODELS))
def test_models_give_logits_and_a_finite_loss(mixer):
    b = batch(5, batch_size=2, seq_len=32, num_pairs=4, vocab_size=32)
    model = MQARModel(mixer, 32, 8)
    assert model(b.inputs).shape == (2, 32, 32)
    loss = model.loss(b)
    loss.backward()
    assert torch.isfinite(loss) and 0 <= model.accuracy(b) <= 1


def test_the_fused_loss_equals_cross_entropy_of_the_readout_with_its_gradients():
    """MQARModel.loss fuses the readout and the cross-entropy (one in-place backward): fp64, the value and every
    parameter's gradient equal F.cross_entropy of logits_at_queries to 1e-12."""
    torch.manual_seed(4)
    b = batch(6, batch_size=3, seq_len=32, num_pairs=4, vocab_size=64)
    model = MQARModel("deltanet", 64, 8, feature_map="silu").double()
    results = []
    for loss_fn in (model.loss, lambda b: torch.nn.functional.cross_entropy(*model.logits_at_queries(b))):
        model.zero_grad()
        loss = loss_fn(b)
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (fused, fused_grads), (plain, plain_grads) = results
    assert abs(fused - plain) <= 1e-12 * abs(plain)
    for got, want in zip(fused_grads, plain_grads):
        assert (got - want).abs().max() <= 1e-12 * want.abs().max()


def test_the_readout_is_the_embedding_transposed():
    torch.manual_seed(0)
    model = MQARModel("deltanet", 32, 8)
    h = torch.randn(3, 8)
    assert torch.allclose(model.readout(h), h @ model.embed.weight.T / 8**0.5, atol=1e-6)
    assert not any(p.shape == (32, 8) and p is not model.embed.weight for p in model.parameters())


@pytest.mark.parametrize("fm", ["silu", "identity", "elu_plus_one", "elu_plus_one_after_silu"])
def test_every_linear_memory_gets_the_same_feature_map_placed_as_fla_places_it(fm):
    """φ = silu is the convolution's SiLU on q and k; any other φ replaces it, on the convolution's linear output
    (fla's DeltaNet: ``activation='silu' if qk_activation == 'silu' else None``); v always ends in the SiLU."""
    phi = {
        "silu": torch.nn.functional.silu,
        "identity": lambda t: t,
        "elu_plus_one": lambda t: torch.nn.functional.elu(t) + 1,
        "elu_plus_one_after_silu": lambda t: torch.nn.functional.elu(torch.nn.functional.silu(t)) + 1,
    }[fm]
    torch.manual_seed(0)
    x = torch.randn(2, 10, 8)
    for name in LINEAR_MEMORIES:
        mixer = MQARModel(name, 32, 8, feature_map=fm).mixer
        projected = mixer.project(x)
        k, v = projected["k"], projected["v"]
        conv = mixer.qkv_conv1d.conv
        linear = conv(mixer.qkv_proj(x).transpose(1, 2))[..., :10].transpose(1, 2)  # the convolution, no activation
        raw_q, raw_k, raw_v = linear.chunk(3, -1)
        want_k = torch.nn.functional.normalize(phi(raw_k), dim=-1).unflatten(-1, (1, 8))
        assert torch.allclose(k, want_k, atol=1e-6), (name, fm)
        assert torch.allclose(v, torch.nn.functional.silu(raw_v).unflatten(-1, (1, 8)), atol=1e-6), (name, fm)


def test_without_the_convolution_silu_is_applied_as_the_feature_map():
    torch.manual_seed(0)
    x = torch.randn(2, 6, 8)
    for name in LINEAR_MEMORIES:
        mixer = MQARModel(name, 32, 8, use_short_conv=False).mixer
        k = mixer.project(x)["k"]
        raw_k = mixer.qkv_proj(x).chunk(3, -1)[1]
        want = torch.nn.functional.normalize(torch.nn.functional.silu(raw_k), dim=-1).unflatten(-1, (1, 8))
        assert torch.allclose(k, want, atol=1e-6), name


def test_rls_is_ungated_and_mesa_gated():
    assert not MQARModel("rls", 32, 8).mixer.use_gate and MQARModel("mesa", 32, 8).mixer.use_gate


def test_no_conv_model_has_no_convolution_and_bad_names_are_refused():
    assert not hasattr(MQARModel("deltanet", 32, 8, use_short_conv=False).mixer, "qkv_conv1d")
    with pytest.raises(ValueError, match="valid names"):
        MQARModel("mamba", 32, 8)
    with pytest.raises(ValueError, match="feature_map"):
        MQARModel("deltanet", 32, 8, feature_map="dpfp")
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        MQARModel("deltanet", 32, 8, nope=1)


def test_layers_stack_and_positions_are_learned_when_asked():
    """Two layers keep twice one layer's state; positions are added to the embedding and refuse a longer sequence;
    a one-layer model keeps its parameter names and initial weights."""
    torch.manual_seed(0)
    one = MQARModel("softmax_attention", 32, 8)
    torch.manual_seed(0)
    two = MQARModel("softmax_attention", 32, 8, n_layers=2, use_short_conv=False, max_positions=16)
    assert two.state_size(16) == 2 * one.state_size(16) and two.positions.weight.shape == (16, 8)
    torch.manual_seed(0)
    again = MQARModel("softmax_attention", 32, 8, n_layers=1, max_positions=0)
    assert all(torch.equal(a, b) for a, b in zip(one.state_dict().values(), again.state_dict().values()))
    assert list(one.state_dict()) == list(again.state_dict())
    b = batch(6, batch_size=2, seq_len=16, num_pairs=2, vocab_size=32)
    assert two(b.inputs).shape == (2, 16, 32)
    with pytest.raises(ValueError, match="16 positions"):
        two(batch(6, batch_size=2, seq_len=24, num_pairs=2, vocab_size=32).inputs)
    with pytest.raises(ValueError, match="n_layers"):
        MQARModel("deltanet", 32, 8, n_layers=0)
