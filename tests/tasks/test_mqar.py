"""The MQAR generator (Zoology-style), its accuracy metric, the tiny models and the grid's CSV round trip."""

import pytest
import torch

from ttr_edu.experiments.mqar import FULL_GRID, Block, MQARGrid, load_results, run_grid, summarise
from ttr_edu.models.mqar import LINEAR_MEMORIES, MODELS, MQARModel
from ttr_edu.tasks.mqar import IGNORE_INDEX, free_slot_fraction, mqar_accuracy, mqar_batch, mqar_layout, query_slots


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
    with pytest.raises(ValueError, match="values, slots: expected shape"):
        mqar_layout(keys, values[:, :1], torch.tensor([[2, 0]]), 12)
    with pytest.raises(TypeError, match="keys"):
        mqar_layout(keys.float(), values, torch.tensor([[2, 0]]), 12)


def test_free_slots_say_when_every_slot_is_a_query():
    assert query_slots(64, 16) == 16 and free_slot_fraction(64, 16) == 0.0  # T = 4N: a permutation, no gaps
    assert free_slot_fraction(96, 16) == 0.5 and free_slot_fraction(96, 4) == 1 - 4 / 44
    with pytest.raises(ValueError, match="seq_len >= 4"):
        free_slot_fraction(60, 16)


@pytest.mark.parametrize("mixer", list(MODELS))
def test_models_give_logits_and_a_finite_loss(mixer):
    b = batch(5, batch_size=2, seq_len=32, num_pairs=4, vocab_size=32)
    model = MQARModel(mixer, 32, 8)
    assert model(b.inputs).shape == (2, 32, 32)
    loss = model.loss(b)
    loss.backward()
    assert torch.isfinite(loss) and 0 <= model.accuracy(b) <= 1


def test_every_linear_memory_gets_the_same_feature_map_and_norm():
    torch.manual_seed(0)
    x = torch.randn(2, 10, 8)
    for fm, phi in (("identity", lambda t: t), ("elu_plus_one", lambda t: torch.nn.functional.elu(t) + 1)):
        for name in LINEAR_MEMORIES:
            mixer = MQARModel(name, 32, 8, feature_map=fm).mixer
            projected = mixer.project(x)
            q, k = projected["q"], projected["k"]
            if name == "linear_attention":  # it maps and normalises inside mix()
                q, k = mixer.feature_map(q), mixer.feature_map(k)
                q, k = torch.nn.functional.normalize(q, dim=-1), torch.nn.functional.normalize(k, dim=-1)
            raw = mixer.qkv_conv1d(mixer.qkv_proj(x)).chunk(3, -1)[1].unflatten(-1, (1, 8))
            want = torch.nn.functional.normalize(phi(raw), dim=-1)
            assert torch.allclose(k, want, atol=1e-6), (name, fm)


def test_rls_is_ungated_and_mesa_gated():
    assert not MQARModel("rls", 32, 8).mixer.use_gate and MQARModel("mesa", 32, 8).mixer.use_gate


def test_no_conv_model_has_no_convolution_and_bad_names_are_refused():
    assert not hasattr(MQARModel("deltanet", 32, 8, use_short_conv=False).mixer, "qkv_conv1d")
    with pytest.raises(ValueError, match="valid names"):
        MQARModel("mamba", 32, 8)
    with pytest.raises(ValueError, match="feature_map"):
        MQARModel("deltanet", 32, 8, feature_map="dpfp")


def test_grid_refuses_cells_without_room_between_queries():
    with pytest.raises(ValueError, match="query slots free"):
        MQARGrid(blocks=(Block("b", ("deltanet",), (16,)),), seq_len=64)
    with pytest.raises(ValueError, match="labels_per_step"):
        MQARGrid(blocks=(Block("b", ("deltanet",), (3,)),), seq_len=64)


def test_full_grid_is_matched_seeded_and_ablated():
    cells = FULL_GRID.cells()
    assert len(cells) == len(set(cells))
    matched = {
        (c.model, c.feature_map) for c in cells if c.short_conv and c.model in ("linear_attention", "deltanet", "rls")
    }
    assert matched == {(m, f) for m in ("linear_attention", "deltanet", "rls") for f in ("identity", "elu_plus_one")}
    assert all(
        len({c.seed for c in cells if (c.model, c.feature_map, c.short_conv, c.num_pairs) == key}) >= 3
        for key in {(c.model, c.feature_map, c.short_conv, c.num_pairs) for c in cells}
    )
    assert {c.model for c in cells if not c.short_conv} >= {"deltanet", "linear_attention", "softmax_attention"}


TINY = dict(seq_len=16, d_model=8, vocab_size=16, labels_per_step=8, max_steps=2, eval_every=1, eval_examples=8)


@pytest.mark.slow  # the first Adam in a process imports torch._dynamo (~10 s here); the run itself is 2 steps
def test_grid_writes_a_csv_that_reads_back_with_its_provenance(tmp_path, capsys):
    grid = MQARGrid(blocks=(Block("b", ("softmax_attention",), (2,), seeds=(0,)),), **TINY)
    rows = run_grid(grid, tmp_path / "g.csv", command="the command", progress=False)
    back = load_results(tmp_path / "g.csv")
    shown = capsys.readouterr().out
    assert "command: the command" in shown and "git commit:" in shown and "started:" in shown
    assert back == rows and back[0]["steps"] <= 2 and back[0]["state_size"] == 2 * 16 * 8
    assert summarise(back, model="softmax_attention")["n"] == 1


@pytest.mark.slow  # two tiny trainings; the first Adam of a process imports torch._dynamo
def test_resume_trains_only_the_missing_cells(tmp_path):
    grid = MQARGrid(blocks=(Block("b", ("softmax_attention", "linear_attention"), (2,), seeds=(0,)),), **TINY)
    out = tmp_path / "g.csv"
    first = run_grid(grid, out, progress=False)
    lines = out.read_text().splitlines()
    header = [i for i, line in enumerate(lines) if line.startswith("model,")][0]
    out.write_text("\n".join(lines[: header + 2]) + "\n")  # as if stopped after the first cell
    kept = load_results(out, show=False)[0]
    out.write_text(
        out.read_text().replace(f",{kept['accuracy']},", ",0.123,")
    )  # a kept row is read back, not retrained
    rows = run_grid(grid, out, resume=True, progress=False)

    def timeless(row):  # the retrained cell repeats its numbers; only its times differ
        return {k: v for k, v in row.items() if k not in ("train_seconds", "cpu_seconds")}

    assert {r["model"]: r["accuracy"] for r in rows}[kept["model"]] == 0.123
    assert [timeless(r) for r in rows if r["model"] != kept["model"]] == [
        timeless(r) for r in first if r["model"] != kept["model"]
    ]
    assert load_results(out, show=False) == rows and "# resumed:" in out.read_text()
