"""Generation speed: a fast-weight LM's recurrent step against softmax attention's key-value cache, and each
against the floor of Python overhead, the same model's step written as plainly as PyTorch allows.

Three 2-layer, d_model = 64 language models (:class:`ttr_edu.models.lm.TinyLM`): DeltaNet (the shipped trained
checkpoint), gated DeltaNet and softmax attention with a key-value cache (untrained, same sizes: a step's cost does
not depend on the weights' values). For each context length t, every model first reads t tokens one at a time
(building its state or cache), then the time of the next tokens is measured (the median over ``--new-tokens``).
Printed side by side, per model:

* ``step``: the package's step as :func:`ttr_edu.models.lm.generate` runs it (:meth:`TinyLM.step_unchecked`: the
  arguments are checked once per generation, then no check and no scan per token);
* ``checked``: :meth:`TinyLM.step`, which checks its token and state on every call (as a caller stepping by hand);
* ``floor``: the same model's step written as plainly as PyTorch allows (:class:`PlainStep`): one function, the
  model's weights read once, no check, no module or op dispatch, the same arithmetic; its logits are checked equal to
  the package's before any timing. It is the floor of Python overhead for this arithmetic;
* ``step/floor``: the package's step over the floor (the target: at most 1.5 at t = 128 and 4096, so
  that the package's structure costs at most half again the arithmetic's own Python overhead);
* tokens per second of the package's step.

The three ways to step one model take turns token by token, in a rotating order, so a change of machine load hits
them alike and none always runs first, on caches the others warmed (one thread by default; the models one after the
other). A
fast-weight layer's step costs the same at every t (its state is (H, D_k, D_v)); softmax attention's step reads the
whole cache and grows it by concatenation, O(t), in the package and in the floor alike. The aten ops per token of
each step (counted with ``torch.profiler``) are printed too: a count that travels between machines (1,116 per
token of the DeltaNet model's checked step before the step lost its per-token checks).

    python benchmarks/lm_generation.py [--lengths 128 512 2048 4096] [--new-tokens 64] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ops_cpu import cpu_model, load, without_profiler_trace_points

from ttr_edu.layers import DeltaNet, GatedDeltaNet, SoftmaxAttention
from ttr_edu.models.lm import LMConfig, TinyLM, load_checkpoint

#: The target: the package's step at most this many times the floor's, at these context lengths.
FLOOR_TARGET, TARGET_LENGTHS = 1.5, (128, 4096)


class PlainStep:
    """A :class:`TinyLM`'s one-token step written out with torch functions on its weights, nothing else.

    Supports the models of this benchmark: every block's mixer a :class:`DeltaNet`, :class:`GatedDeltaNet` (SiLU
    features, learned β) or :class:`SoftmaxAttention` (no QK-norm), each with its short convolution. The state is a
    list, per block, of ``[cache, memory]``: the projected q, k, v of the previous ``conv_size − 1`` tokens, and the
    fast weight ``S`` ``(B·H, D, D)`` or the key-value cache ``(k, v)`` ``(B, t, H, D)``.
    """

    def __init__(self, model: TinyLM) -> None:
        self.embedding = model.embedding.weight
        self.final = (model.final_norm.weight, model.final_norm.eps)
        self.blocks = []
        for block in model.blocks:
            mixer = block.mixer
            kind = type(mixer)
            if kind not in (DeltaNet, GatedDeltaNet, SoftmaxAttention) or not mixer.use_short_conv:
                raise TypeError(f"PlainStep: no plain step for {kind.__name__} here")
            if kind is SoftmaxAttention and mixer.qk_norm:
                raise TypeError("PlainStep: softmax attention with QK-norm has no plain step here")
            if kind is not SoftmaxAttention and (mixer.feature_map != "silu" or not mixer.use_beta):
                raise TypeError("PlainStep: DeltaNet with SiLU features and a learned β only")
            conv = mixer.qkv_conv1d.conv
            p = dict(
                kind=kind,
                H=mixer.num_heads,
                D=mixer.head_dim,
                K=conv.kernel_size[0],
                norm=(block.mixer_norm.weight, block.mixer_norm.eps),
                qkv=mixer.qkv_proj.weight,
                taps=conv.weight[:, 0].T.contiguous(),  # (K, 3 d): tap j meets the j-th of the last K inputs
                conv_bias=conv.bias,
                o=mixer.o_proj.weight,
                mlp_norm=(block.mlp_norm.weight, block.mlp_norm.eps),
                mlp=(block.mlp[0].weight, block.mlp[0].bias, block.mlp[2].weight, block.mlp[2].bias),
            )
            if kind is not SoftmaxAttention:
                p.update(b=(mixer.b_proj.weight, mixer.b_proj.bias), o_norm=(mixer.o_norm.weight, mixer.o_norm.eps))
            if kind is GatedDeltaNet:
                p.update(a=mixer.a_proj.weight, A=mixer.A_log.exp(), dt_bias=mixer.dt_bias)
            self.blocks.append(p)

    def init_state(self) -> list:
        return [[None, None] for _ in self.blocks]

    def step(self, token: torch.Tensor, state: list) -> torch.Tensor:
        """Logits ``(B, vocab)`` for ``token`` ``(B,)``; ``state`` is updated in place."""
        x = F.embedding(token, self.embedding)
        B, d = x.shape
        for p, s in zip(self.blocks, state):
            h = F.rms_norm(x, (d,), *p["norm"])
            projected = F.linear(h, p["qkv"])[:, None]  # (B, 1, 3 d): this token's q, k, v
            window = projected if s[0] is None else torch.cat([s[0], projected], dim=1)
            s[0] = window[:, 1 - p["K"] :] if p["K"] > 1 else None
            L, H, D = window.shape[1], p["H"], p["D"]
            qkv = F.silu((window * p["taps"][-L:]).sum(1) + p["conv_bias"])  # the conv's output at this token
            if p["kind"] is SoftmaxAttention:
                q, k, v = qkv.view(B, 1, 3, H, D).unbind(2)
                if s[1] is not None:
                    k, v = torch.cat([s[1][0], k], dim=1), torch.cat([s[1][1], v], dim=1)
                s[1] = (k, v)
                weights = torch.softmax(torch.einsum("bqhd,bthd->bhqt", q * D**-0.5, k), dim=-1)
                o = torch.einsum("bhqt,bthd->bqhd", weights, v).reshape(B, d)
            else:
                qk = qkv[:, : 2 * d].reshape(B, 2, H, 1, D)  # SiLU'd once, by the convolution
                qk = qk / torch.linalg.vector_norm(qk, dim=-1, keepdim=True).clamp_min(1e-12)  # F.normalize's maths
                q, k = qk[:, 0].reshape(B * H, 1, D), qk[:, 1].reshape(B * H, 1, D)
                v = qkv[:, 2 * d :].reshape(B * H, 1, D)
                beta = torch.sigmoid(F.linear(h, *p["b"])).view(B * H, 1, 1)
                S = h.new_zeros(B * H, D, D) if s[1] is None else s[1]
                if p["kind"] is GatedDeltaNet:
                    g = -p["A"] * F.softplus(F.linear(h, p["a"]) + p["dt_bias"])
                    S = S * torch.exp(g).view(B * H, 1, 1)
                error = torch.baddbmm(v, k, S, alpha=-1.0)  # v − Sᵀ k
                S = torch.baddbmm(S, k.mT, error * beta)
                s[1] = S
                o = F.rms_norm(torch.bmm(q * D**-0.5, S).view(B, H, D), (D,), *p["o_norm"]).view(B, d)
            x = x + F.linear(o, p["o"])
            w1, b1, w2, b2 = p["mlp"]
            x = x + F.linear(F.gelu(F.linear(F.rms_norm(x, (d,), *p["mlp_norm"]), w1, b1)), w2, b2)
        return F.rms_norm(x, (d,), *self.final) @ self.embedding.T


def build_models(seed: int = 0) -> dict[str, TinyLM]:
    """The shipped DeltaNet checkpoint, and a gated DeltaNet and softmax-attention model of its sizes."""
    deltanet, _ = load_checkpoint()
    torch.manual_seed(seed)
    config = deltanet.config
    others = {
        name: TinyLM(LMConfig(mixer=name, d_model=config.d_model, num_heads=config.num_heads, n_layers=config.n_layers))
        for name in ("gated_deltanet", "softmax")
    }
    return {"deltanet": deltanet, **{name: model.eval() for name, model in others.items()}}


def step_calls(model: TinyLM, plain: PlainStep):
    """name -> (make a state, take one step ``(token, state) -> state``) for the three ways to step ``model``."""

    def package(token, state):
        return model.step_unchecked(token, state)[1]

    def checked(token, state):
        return model.step(token, state)[1]

    def floor(token, state):
        plain.step(token, state)
        return state

    return {
        "step": (lambda: model.init_state_for(1), package),
        "checked": (model.init_state, checked),
        "floor": (plain.init_state, floor),
    }


@torch.no_grad()
def check_floor_equals_step(model: TinyLM, plain: PlainStep, tokens: torch.Tensor) -> float:
    """The largest difference between the floor's logits and the package's over ``tokens`` ``(1, T)``; raises if
    they differ by more than fp32 rounding (then the floor would not be the same model)."""
    state, plain_state, worst = model.init_state_for(1), plain.init_state(), 0.0
    for t in range(tokens.shape[1]):
        logits, state = model.step_unchecked(tokens[:, t], state)
        worst = max(worst, (plain.step(tokens[:, t], plain_state) - logits).abs().max().item())
    if worst > 1e-4:
        raise AssertionError(f"the plain step is not the model's step: logits differ by {worst:.3g}")
    return worst


@torch.no_grad()
def aten_calls_per_token(make_state, step, tokens: torch.Tensor, context: int = 8) -> float:
    """Aten ops per token of ``step`` after ``context`` tokens, counted by ``torch.profiler`` over 4 tokens."""
    state = make_state()
    for t in range(context):
        state = step(tokens[:, t], state)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for t in range(context, context + 4):
            state = step(tokens[:, t], state)
    return sum(e.count for e in prof.key_averages() if e.key.startswith("aten::")) / 4


@torch.no_grad()
def per_token_ms(ways: dict, context: int, new_tokens: int) -> dict[str, float]:
    """Median ms per token of each way to step one model after reading ``context`` tokens. The ways take turns token
    by token, in an order that rotates, so a change of machine load hits them alike and none is always the first
    to run after the others have warmed the caches."""
    tokens = torch.randint(0, 256, (1, context + new_tokens), generator=torch.Generator().manual_seed(0))
    states = {way: make_state() for way, (make_state, _) in ways.items()}
    for way, (_, step) in ways.items():
        for t in range(context):
            states[way] = step(tokens[:, t], states[way])
    order = list(ways)
    times: dict[str, list[float]] = {way: [] for way in ways}
    for t in range(context, context + new_tokens):
        for way in order[t % len(order) :] + order[: t % len(order)]:
            step = ways[way][1]
            start = time.perf_counter()
            states[way] = step(tokens[:, t], states[way])
            times[way].append(time.perf_counter() - start)
    return {way: 1e3 * statistics.median(values) for way, values in times.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 2048, 4096])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    models = build_models()
    plains = {name: PlainStep(model) for name, model in models.items()}
    probe = torch.randint(0, 256, (1, 40), generator=torch.Generator().manual_seed(1))
    calls = {}
    config = models["deltanet"].config
    print(
        f"per-token generation time (ms, median of {args.new_tokens}), TinyLM d_model {config.d_model}, "
        f"{config.n_layers} layers, 1 sequence, {args.threads} thread(s), torch {torch.__version__}; "
        f"load average {load()} on {os.cpu_count()} cores of {cpu_model()}\n"
    )
    print(f"{'model':<15} {'aten ops per token: step':>25} {'checked':>8} {'floor':>6}   floor = step (max |Δ logit|)")
    for name, model in models.items():
        calls[name] = ways = step_calls(model, plains[name])
        counts = [aten_calls_per_token(*ways[way], probe) for way in ("step", "checked", "floor")]
        worst = check_floor_equals_step(model, plains[name], probe)
        print(f"{name:<15} {counts[0]:>25.0f} {counts[1]:>8.0f} {counts[2]:>6.0f}   {worst:.1e}")
    print()
    header = f"{'context':>8} {'model':<15} {'step':>8} {'checked':>8} {'floor':>8} {'step/floor':>11} {'tokens/s':>9}"
    print(header)
    print("-" * len(header))
    ratios: dict[tuple[str, int], float] = {}
    for length in args.lengths:
        ms = {
            (name, way): value
            for name in models
            for way, value in per_token_ms(calls[name], length, args.new_tokens).items()
        }
        for name in models:
            step, checked, floor = (ms[name, way] for way in ("step", "checked", "floor"))
            ratios[name, length] = step / floor
            print(
                f"{length:>8} {name:<15} {step:>8.3f} {checked:>8.3f} {floor:>8.3f} {step / floor:>10.2f}x "
                f"{1e3 / step:>9.0f}"
            )
        print(f"{'':>8} softmax/deltanet per token: {ms['softmax', 'step'] / ms['deltanet', 'step']:.2f}x")
    print(f"\nload average after the run: {load()}")
    print(f"\ntargets (the package's step within {FLOOR_TARGET}x of the floor at t = 128 and 4096)")
    for name in models:
        for length in TARGET_LENGTHS:
            ratio = ratios.get((name, length))
            if ratio is None:
                print(f"  {name} at t={length}: not measured (add {length} to --lengths): NOT met")
                continue
            verdict = "met" if ratio <= FLOOR_TARGET else "NOT met"
            print(f"  {name} at t={length}: step/floor = {ratio:.2f} (target <= {FLOOR_TARGET}): {verdict}")


if __name__ == "__main__":
    with without_profiler_trace_points():
        main()
