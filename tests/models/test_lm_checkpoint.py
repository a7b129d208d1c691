"""The shipped language model loads, is small, says how it was made, and reproduces its recorded valid bits per byte."""

import pytest
import torch

from ttr_edu.experiments.lm import evaluate_bpb
from ttr_edu.experiments.lm_checkpoint import MIXER, RECIPE, SEED
from ttr_edu.models.lm import SHIPPED_CHECKPOINT, LMConfig, TinyLM, generate, load_checkpoint, save_checkpoint
from ttr_edu.tasks.text import load_stdlib_corpus


def test_the_shipped_checkpoint_is_package_data_under_one_megabyte():
    assert SHIPPED_CHECKPOINT.is_file()
    assert SHIPPED_CHECKPOINT.stat().st_size < 1_000_000


def test_it_records_its_recipe_and_its_corpus():
    model, meta = load_checkpoint()
    assert isinstance(model, TinyLM) and not model.training
    assert meta["mixer"] == MIXER and meta["seed"] == SEED and meta["recipe"]["steps"] == RECIPE.steps
    assert {"valid_bpb", "test_bpb", "corpus_sha256", "python_version", "torch_version", "train_seconds"} <= set(meta)
    assert model.num_parameters() == meta["parameters"]


@pytest.mark.xfail(
    strict=True,
    reason="the shipped checkpoint was trained with a DeltaNet that applied the SiLU to q and k twice; DeltaNet now "
    "applies it once, as fla's, so the weights compute another function until the checkpoint is retrained "
    "(python -m ttr_edu.experiments.lm_checkpoint); then this test passes, and strict=True asks for the mark's removal",
)
def test_it_reproduces_its_recorded_valid_bits_per_byte():
    model, meta = load_checkpoint()
    corpus = load_stdlib_corpus()
    if corpus.sha256 != meta["corpus_sha256"]:
        pytest.skip(f"trained on Python {meta['python_version']}'s standard library, this is {corpus.python_version}")
    torch.set_num_threads(1)
    bpb = evaluate_bpb(model, corpus.valid, meta["recipe"]["seq_len"])
    assert abs(bpb - meta["valid_bpb"]) < 1e-4, (bpb, meta["valid_bpb"])


def test_it_generates_bytes_with_the_recurrent_form():
    model, _ = load_checkpoint()
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
