"""Generation speed: a fast-weight LM's recurrent step against softmax attention's key-value cache.

For each context length L, both models first read L tokens one at a time (building their state or cache), then
the time of generating the next tokens is measured (median over tokens). A fast-weight layer's step costs the same at
every L (its state is (H, D_k, D_v)); softmax attention's step reads the whole cache, O(L). Printed side by side:

    python benchmarks/lm_generation.py [--lengths 128 512 2048 4096] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ttr_edu.models.lm import LMConfig, TinyLM


def per_token_ms(models: dict[str, TinyLM], context: int, new_tokens: int) -> dict[str, float]:
    """Median ms per generated token of each model after reading ``context`` tokens; the models take turns token by
    token, so a change of machine load hits all of them alike."""
    tokens = torch.randint(0, 256, (1, context + new_tokens), generator=torch.Generator().manual_seed(0))
    states = {name: model.init_state() for name, model in models.items()}
    for name, model in models.items():
        for t in range(context):
            _, states[name] = model.step(tokens[:, t], states[name])
    times: dict[str, list[float]] = {name: [] for name in models}
    for t in range(context, context + new_tokens):
        for name, model in models.items():
            start = time.perf_counter()
            _, states[name] = model.step(tokens[:, t], states[name])
            times[name].append(time.perf_counter() - start)
    return {name: 1e3 * statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 2048, 4096])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    models = {name: TinyLM(LMConfig(mixer=name)).eval() for name in ("deltanet", "gated_deltanet", "softmax")}
    print(
        f"per-token generation time (ms, median of {args.new_tokens}), d_model 64, 2 layers, 1 sequence, "
        f"{args.threads} thread(s)"
    )
    print(f"{'context':>8} " + " ".join(f"{n:>15}" for n in models) + f" {'softmax/deltanet':>17}")
    for length in args.lengths:
        ms = per_token_ms(models, length, args.new_tokens)
        print(
            f"{length:>8} " + " ".join(f"{ms[n]:>15.3f}" for n in models) + f" {ms['softmax'] / ms['deltanet']:>16.2f}x"
        )
    print("tokens per second = 1000 / ms")


if __name__ == "__main__":
    main()
