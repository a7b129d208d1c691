"""The MQAR generator (Zoology-style), its accuracy metric, the tiny models and the grid's CSV round trip."""

import pytest
import torch

from ttr_edu.experiments.mqar import MQARGrid, load_results, run_grid
from ttr_edu.models_mqar import MQARModel
from ttr_edu.mqar import IGNORE_INDEX, mqar_accuracy, mqar_batch


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


@pytest.mark.parametrize("mixer", ["linear_attention", "deltanet", "gated_deltanet", "mesa", "softmax_attention",
                                   "local_linear_attention"])
def test_models_give_logits_and_a_finite_loss(mixer):
    b = batch(5, batch_size=2, seq_len=32, num_pairs=4, vocab_size=32)
    model = MQARModel(mixer, 32, 8)
    assert model(b.inputs).shape == (2, 32, 32)
    loss = model.loss(b)
    loss.backward()
    assert torch.isfinite(loss) and 0 <= model.accuracy(b) <= 1


def test_unknown_mixer_is_named():
    with pytest.raises(ValueError, match="valid names"):
        MQARModel("mamba", 32, 8)


@pytest.mark.slow  # the first Adam in a process imports torch._dynamo (~10 s here); the run itself is 2 steps
def test_grid_writes_a_csv_that_reads_back(tmp_path):
    grid = MQARGrid(mixers=("softmax_attention",), num_pairs=(2,), d_models=(8,), seq_len=16, vocab_size=16,
                    batch_size=4, max_steps=2, eval_every=1, eval_examples=8)
    rows = run_grid(grid, tmp_path / "g.csv", progress=False)
    back = load_results(tmp_path / "g.csv")
    assert back == rows and back[0]["steps"] <= 2 and back[0]["state_size"] == 2 * 16 * 8


@pytest.mark.slow  # two tiny trainings; the first Adam of a process imports torch._dynamo
def test_resume_trains_only_the_missing_cells(tmp_path):
    grid = MQARGrid(mixers=("softmax_attention", "linear_attention"), num_pairs=(2,), d_models=(8,), seq_len=16,
                    vocab_size=16, batch_size=4, max_steps=2, eval_every=1, eval_examples=8)
    out = tmp_path / "g.csv"
    first = run_grid(grid, out, progress=False)
    out.write_text("\n".join(out.read_text().splitlines()[:2]) + "\n")  # as if stopped after the first cell
    marker = dict(load_results(out)[0], accuracy=0.123)  # a kept row is read back, not retrained
    out.write_text(out.read_text().replace(str(first[0]["accuracy"]), "0.123"))
    rows = run_grid(grid, out, resume=True, progress=False)
    def timeless(row):  # the retrained cell repeats its numbers; only its wall time differs
        return {k: v for k, v in row.items() if k != "train_seconds"}

    assert rows[0] == marker and timeless(rows[1]) == timeless(first[1])
    assert load_results(out) == rows
