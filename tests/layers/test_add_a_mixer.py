"""Adding a mixer is one class and one spec: a decayed Hebbian memory, defined here, registered, then trained in both
models, generated with, and put through the whole layer suite. Nothing else in the package is touched."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.helpers.layer_suite import check_steps_as_it_forwards, feature_maps, run_layer_suite
from ttr_edu.layers import MIXERS, REGISTRY, Mixer, MixerSpec, register, unregister
from ttr_edu.models.lm import LMConfig, TinyLM, causal_lm_loss, generate
from ttr_edu.models.mqar import MQARModel
from ttr_edu.ops import gated_linear_attention_chunk, gated_linear_attention_recurrent
from ttr_edu.tasks.mqar import mqar_batch


class DecayedHebbian(Mixer):
    """A Hebbian memory that forgets: ``S_t = γ S_{t−1} + k_t v_tᵀ``, ``o_t = S_tᵀ q_t``, with one learned decay
    ``γ = σ(a) ∈ (0, 1)`` per head: gated linear attention with a constant gate."""

    def __init__(
        self,
        hidden_size: int,
        num_heads: int = 1,
        *,
        decay: float = 0.9,
        use_short_conv: bool = True,
        conv_size: int = 4,
        feature_map: str = "silu",
    ) -> None:
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size, feature_map)
        self.decay_logit = nn.Parameter(torch.full((num_heads,), math.log(decay / (1 - decay))))
        self.o_norm = nn.RMSNorm(self.head_dim)

    def op_inputs(self, x, qkv):
        inputs = super().op_inputs(x, qkv)
        inputs["g"] = nn.functional.logsigmoid(self.decay_logit).expand(*x.shape[:2], -1)  # log γ, every token
        return inputs

    def mix(self, q, k, v, g):
        return self.o_norm(gated_linear_attention_chunk(q, k, v, g)[0])

    def mix_step(self, memory, q, k, v, g):
        o, memory = gated_linear_attention_recurrent(q, k, v, g, initial_state=memory, output_final_state=True)
        return self.o_norm(o), memory


SPEC = MixerSpec(
    "decayed_hebbian",
    "decayed Hebbian",
    DecayedHebbian,
    named_layer="gated_linear_attention",
    fuzz={"decay": ("positive", 0.9)},
)


@pytest.fixture
def registered():
    register(SPEC)
    yield SPEC
    unregister(SPEC.name)


def test_it_registers_into_every_list(registered):
    assert REGISTRY["decayed_hebbian"] is SPEC and MIXERS["decayed_hebbian"] is SPEC
    assert isinstance(MIXERS["decayed_hebbian"](16, 2), DecayedHebbian)


def test_it_is_gone_once_unregistered():
    register(SPEC)
    unregister(SPEC.name)
    assert "decayed_hebbian" not in REGISTRY and "decayed_hebbian" not in MIXERS
    with pytest.raises(ValueError, match="mixer: expected one of"):
        LMConfig(mixer="decayed_hebbian")


def test_the_layer_suite_passes(registered):
    run_layer_suite(registered)


@pytest.mark.parametrize("decay", [0.5, 0.99])
def test_it_steps_as_it_forwards_for_every_feature_map_and_option(registered, decay):
    for conv in (True, False):
        for options in feature_maps(registered):
            check_steps_as_it_forwards(registered(8, 2, decay=decay, use_short_conv=conv, conv_size=3, **options))


def test_a_language_model_trains_and_generates_with_it(registered):
    torch.manual_seed(0)
    model = TinyLM(LMConfig(mixer="decayed_hebbian", d_model=32, num_heads=2, n_layers=1))
    data = torch.randint(0, 256, (8, 33), generator=torch.Generator().manual_seed(0))
    data[:, 1::2] = data[:, 0:-1:2]  # every odd byte repeats the one before it: learnable
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        loss = causal_lm_loss(model(data), data)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0], losses
    out = generate(model, data[:2, :5], 12, temperature=0)
    assert out.shape == (2, 17) and torch.equal(out[:, :5], data[:2, :5])
    model.eval()
    with torch.no_grad():
        full, state, steps = model(data[:2, :20]), model.init_state(), []
        for t in range(20):
            logits, state = model.step(data[:2, t], state)
            steps.append(logits)
    assert torch.allclose(torch.stack(steps, dim=1), full, atol=1e-4)


def test_the_mqar_model_trains_with_it(registered):
    torch.manual_seed(0)
    model = MQARModel("decayed_hebbian", 32, 16, feature_map="identity")
    assert isinstance(model.mixer, DecayedHebbian) and model.mixer.feature_map == "identity"
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(40):
        loss = model.loss(mqar_batch(32, 24, 4, 32, generator=generator))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert sum(losses[-5:]) < 0.9 * sum(losses[:5]), losses


PACKAGE_CLASS = '''

class DecayedHebbian(Mixer):
    """A Hebbian memory that forgets, ``S_t = γ S_{t−1} + k_t v_tᵀ``, ``γ = σ(a)`` per head."""

    def __init__(self, hidden_size, num_heads=1, *, decay=0.9, use_short_conv=True, conv_size=4, feature_map="silu"):
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size, feature_map)
        self.decay_logit = nn.Parameter(torch.full((num_heads,), math.log(decay / (1 - decay))))
        self.o_norm = nn.RMSNorm(self.head_dim)

    def op_inputs(self, x, qkv):
        inputs = super().op_inputs(x, qkv)
        inputs["g"] = F.logsigmoid(self.decay_logit).expand(*x.shape[:2], -1)
        return inputs

    def mix(self, q, k, v, g):
        return self.o_norm(gated_linear_attention_chunk(q, k, v, g)[0])

    def mix_step(self, memory, q, k, v, g):
        o, memory = gated_linear_attention_recurrent(q, k, v, g, initial_state=memory, output_final_state=True)
        return self.o_norm(o), memory


register(
    MixerSpec(
        "decayed_hebbian",
        "decayed Hebbian",
        DecayedHebbian,
        named_layer="gated_linear_attention",
        mqar=True,
        fuzz={"decay": ("positive", 0.9)},
    )
)
'''
CHECK_IN_THE_COPY = """
from tests.helpers.fuzz_targets import LAYER_OPTIONS, TARGETS
from tests.helpers.layer_suite import run_layer_suite
from tests.test_fuzz_public_api import test_every_public_callable_is_fuzzed_or_excluded
from ttr_edu.layers import MIXERS, DecayedHebbian
from ttr_edu.models.mqar import MODELS, MQARModel

assert MIXERS["decayed_hebbian"].layer is DecayedHebbian and "decayed_hebbian" in MODELS
assert "DecayedHebbian" in LAYER_OPTIONS and "ttr_edu.layers.DecayedHebbian.step" in TARGETS
test_every_public_callable_is_fuzzed_or_excluded()
run_layer_suite(MIXERS["decayed_hebbian"])
MQARModel("decayed_hebbian", 32, 8, feature_map="identity")
print("ok")
"""


def test_a_mixer_added_to_the_package_touches_the_two_files_contributing_lists(tmp_path):
    """CONTRIBUTING's table is the truth: in a copy of the repository, the class and its spec appended to
    layers/linear.py and its name exported in layers/__init__.py make a mixer that the registry's views, the MQAR
    grid, the public-API fuzz (its recipe from the spec) and the whole layer suite take, with no other file edited."""
    root = Path(__file__).resolve().parents[2]
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "results", "checkpoints")
    for folder in ("ttr_edu", "tests"):
        shutil.copytree(root / folder, tmp_path / folder, ignore=ignore)
    linear = tmp_path / "ttr_edu" / "layers" / "linear.py"
    text = linear.read_text().replace('    "MesaLayer",\n]', '    "MesaLayer",\n    "DecayedHebbian",\n]', 1)
    text = text.replace(
        "from ttr_edu.ops import (\n",
        "from ttr_edu.ops import (\n    gated_linear_attention_chunk,\n    gated_linear_attention_recurrent,\n",
        1,
    )
    linear.write_text(text + PACKAGE_CLASS)
    init = tmp_path / "ttr_edu" / "layers" / "__init__.py"
    text = init.read_text().replace(
        "import DeltaNet, GatedDeltaNet,", "import DecayedHebbian, DeltaNet, GatedDeltaNet,", 1
    )
    init.write_text(text.replace('    "MesaLayer",\n', '    "MesaLayer",\n    "DecayedHebbian",\n', 1))
    result = subprocess.run(
        [sys.executable, "-c", CHECK_IN_THE_COPY],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]
