"""benchmarks/lm_generation.py: its floor is the same model as the package's step, and it prints every target."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "lm_generation.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("lm_generation", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("mixer", ["deltanet", "gated_deltanet", "softmax"])
def test_the_floor_is_the_model(bench, mixer):
    from ttr_edu.models.lm import LMConfig, TinyLM

    torch.manual_seed(0)
    model = TinyLM(LMConfig(mixer=mixer, d_model=16, num_heads=2, n_layers=2)).eval()
    tokens = torch.randint(0, 256, (1, 12))
    assert bench.check_floor_equals_step(model, bench.PlainStep(model), tokens) <= 1e-5
    with torch.no_grad():  # and the package's step is the forward pass
        full = model(tokens)[0, -1]
        state = model.init_state_for(1)
        for t in range(12):
            logits, state = model.step_unchecked(tokens[:, t], state)
    assert torch.allclose(logits[0], full, atol=1e-5)


def test_the_floor_refuses_what_it_does_not_write_out(bench):
    from ttr_edu.models.lm import LMConfig, TinyLM

    with pytest.raises(TypeError, match="PlainStep"):
        bench.PlainStep(TinyLM(LMConfig(mixer="linear", d_model=16, num_heads=2)))


def test_main_prints_every_target(bench, capsys):
    bench.main(["--lengths", "4", "--new-tokens", "2"])
    out = capsys.readouterr().out
    assert "aten ops per token" in out and "step/floor" in out and "tokens/s" in out
    targets = out.split("targets")[1].splitlines()[1:]
    assert len(targets) == 6 and all(line.endswith(("met", "NOT met")) for line in targets)
