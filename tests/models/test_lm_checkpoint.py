"""The shipped language models load, are small, say how they were made, and reproduce their recorded valid bits per
byte."""

import pytest
import torch

from ttr_edu.experiments.lm import evaluate_bpb
from ttr_edu.experiments.lm_checkpoint import CHECKPOINTS, MIXER, RECIPE, SEED
from ttr_edu.models.lm import SHIPPED_CHECKPOINT, LMConfig, TinyLM, generate, load_checkpoint, save_checkpoint
from ttr_edu.tasks.text import load_stdlib_corpus


def test_the_shipped_checkpoints_are_package_data_under_one_megabyte():
    assert CHECKPOINTS[MIXER] == SHIPPED_CHECKPOINT
    for path in CHECKPOINTS.values():
        assert path.is_file() and path.stat().st_size < 1_000_000


@pytest.mark.parametrize("mixer", list(CHECKPOINTS))
def test_it_records_its_recipe_and_its_corpus(mixer):
    model, meta = load_checkpoint(CHECKPOINTS[mixer])
    assert isinstance(model, TinyLM) and not model.training
    assert meta["mixer"] == mixer and meta["seed"] == SEED and meta["recipe"]["steps"] == RECIPE.steps
    assert {"valid_bpb", "test_bpb", "corpus_sha256", "python_version", "torch_version", "train_seconds"} <= set(meta)
    assert model.num_parameters() == meta["parameters"]


@pytest.mark.parametrize("mixer", list(CHECKPOINTS))
def test_it_reproduces_its_recorded_valid_bits_per_byte(mixer):
    model, meta = load_checkpoint(CHECKPOINTS[mixer])
    corpus = load_stdlib_corpus()
    if corpus.sha256 != meta["corpus_sha256"]:
        pytest.skip(f"trained on Python {meta['python_version']}'s standard library, this is {corpus.python_version}")
    torch.set_num_threads(1)
    bpb = evaluate_bpb(model, corpus.valid, meta["recipe"]["seq_len"])
    assert abs(bpb - meta["valid_bpb"]) < 1e-4, (bpb, meta["valid_bpb"])


@pytest.mark.parametrize("mixer", list(CHECKPOINTS))
def test_it_generates_bytes_with_the_recurrent_form(mixer):
    model, _ = load_checkpoint(CHECKPOINTS[mixer])
    prompt = torch.tensor([list(b"def ")])
    out = generate(model, prompt, 20, temperature=0)
    assert out.shape == (1, 24) and torch.equal(out[:, :4], prompt)


def test_save_and_load_round_trip(tmp_path):
    torch.manual_seed(0)
    model = TinyLM(LMConfig(mixer="linear", d_model=16, num_heads=1, n_layers=1))
    save_checkpoint(model, tmp_path / "m.pt", {"note": "tiny", "torch_version": torch.__version__, "sizes": (1, 2)})
    loaded, meta = load_checkpoint(tmp_path / "m.pt")
    assert meta == {"note": "tiny", "torch_version": str(torch.__version__), "sizes": [1, 2]}
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))


def test_bad_paths_and_files_are_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing.pt")
    torch.save({"weights": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a TinyLM checkpoint"):
        load_checkpoint(tmp_path / "other.pt")
    with pytest.raises(TypeError, match="metadata"):
        save_checkpoint(TinyLM(LMConfig(d_model=16, num_heads=1, n_layers=1)), tmp_path / "x.pt", {"f": object()})
