"""What recording the dual form costs: time and memory of training with and without a DualFormRecorder.

The setting the dual-form recorder was built for: an MLP 64-128-128-10 (ReLU) trained by SGD on scikit-learn's digits
for 2000 steps, all three linear layers recorded. Each configuration is timed ``--repeats`` times, interleaved with the
plain run, and the median and the fastest are reported; the ratio is recorded / plain (medians; the machine is shared,
so the fastest run is shown as well). Memory is the recorder's buffers (exact bytes) and, measured, how much more the
resident memory grows over training in a recorded run than in a plain one, each in a fresh process (this would
reveal anything held beyond the buffers, e.g. retained autograd graphs).

    python benchmarks/dual_form_recording.py                 # batch 16 and 32, keys fp32 and fp16
    python benchmarks/dual_form_recording.py --batch-sizes 32 --steps 500

Targets: time ratio <= 2x (a recorded run costs at most twice a plain one), memory <= 100 MB.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import psutil
import torch
from torch import nn

from ttr_edu.dual_form import DualFormRecorder
from ttr_edu.tasks.images import load_digits

LAYERS = ["0", "2", "4"]


def make_model(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))


def train(steps: int, batch_size: int, x: torch.Tensor, y: torch.Tensor, recorder_kwargs: dict | None) -> dict:
    """Train a fresh model; return seconds, the recorder's bytes and the dual's relative error."""
    model = make_model(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    generator = torch.Generator().manual_seed(1)
    batches = torch.randint(0, len(y), (steps, batch_size), generator=generator)  # sample ids, drawn up front
    loss_fn = nn.CrossEntropyLoss()
    rss_before = psutil.Process().memory_info().rss
    recorder = None
    if recorder_kwargs is not None:
        recorder = DualFormRecorder(
            model, optimizer, LAYERS, max_steps=steps, patterns_per_step=batch_size, verbose=False, **recorder_kwargs
        )
    start = time.perf_counter()
    for ids in batches:
        optimizer.zero_grad()
        loss_fn(model(x[ids]), y[ids]).backward()
        if recorder is not None:
            recorder.annotate(labels=y[ids], sample_ids=ids)
        optimizer.step()
    seconds = time.perf_counter() - start
    rss_growth = psutil.Process().memory_info().rss - rss_before  # pages touched: buffers allocate lazily
    result = {"seconds": seconds, "bytes": recorder.nbytes if recorder else 0, "rss_growth": rss_growth}
    if recorder is not None:  # the record is usable: its dual reproduces the trained model
        recorder.close()
        with torch.no_grad():
            primal = model(x[:256])
        with recorder.dual():
            dual = model(x[:256])
        result["rel_err"] = ((dual - primal).norm() / primal.norm()).item()
    return result


def rss_growth_mb(steps: int, batch_size: int, recorder_kwargs: dict | None) -> float:
    """Growth of resident memory (MB) over one training run, in a fresh process (no memory reused from others)."""
    config = json.dumps({"steps": steps, "batch": batch_size, "kwargs": recorder_kwargs})
    out = subprocess.run([sys.executable, __file__, "--child", config], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def child(config: str) -> None:
    config = json.loads(config)
    kwargs = config["kwargs"]
    if kwargs is not None and "key_dtype" in kwargs:
        kwargs["key_dtype"] = getattr(torch, kwargs["key_dtype"])
    torch.set_num_threads(1)
    data = load_digits()
    train(50, config["batch"], data.x_train, data.y_train, None)  # warm-up: lazy allocations of torch itself
    print(train(config["steps"], config["batch"], data.x_train, data.y_train, kwargs)["rss_growth"] / 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier on a shared machine)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child)
    torch.set_num_threads(args.threads)
    data = load_digits()
    x, y = data.x_train, data.y_train
    configs = {  # JSON-able, for the child processes; key_dtype by name
        "keys fp32": dict(),
        "keys fp16": dict(key_dtype="float16"),
        "keys fp32, verify off": dict(verify=False),
    }
    print(
        f"MLP 64-128-128-10, SGD (momentum 0.9), {args.steps} steps, digits; torch {torch.__version__}, "
        f"{args.threads} thread(s); median of {args.repeats} interleaved runs"
    )
    header = (
        f"{'batch':>5} | {'recording':<21} | {'plain s (min)':>14} | {'recorded s (min)':>16} | {'ratio':>6} | "
        f"{'buffers MB':>10} | {'RSS +MB':>8} | {'dual rel err':>12} | <=2x, <=100 MB"
    )
    print(header)
    print("-" * len(header))
    for batch_size in args.batch_sizes:
        train(50, batch_size, x, y, None)  # warm-up
        for label, config in configs.items():
            kwargs = {k: getattr(torch, v) if k == "key_dtype" else v for k, v in config.items()}
            plain, recorded = [], []
            for _ in range(args.repeats):
                plain.append(train(args.steps, batch_size, x, y, None))
                recorded.append(train(args.steps, batch_size, x, y, kwargs))
            t_plain = [r["seconds"] for r in plain]
            t_rec = [r["seconds"] for r in recorded]
            ratio = statistics.median(t_rec) / statistics.median(t_plain)
            mb = recorded[0]["bytes"] / 1e6
            rss = rss_growth_mb(args.steps, batch_size, config) - rss_growth_mb(args.steps, batch_size, None)
            ok = "met" if ratio <= 2.0 and mb <= 100.0 else "MISSED"
            print(
                f"{batch_size:>5} | {label:<21} | {statistics.median(t_plain):>6.2f} ({min(t_plain):>5.2f}) | "
                f"{statistics.median(t_rec):>8.2f} ({min(t_rec):>5.2f}) | {ratio:>5.2f}x | {mb:>10.1f} | "
                f"{rss:>8.1f} | {recorded[0]['rel_err']:>12.2e} | {ok}"
            )


if __name__ == "__main__":
    main()
