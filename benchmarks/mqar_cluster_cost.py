"""What the Zoology-scale MQAR grid costs: seconds per training step, measured, and the core-hours of the grid.

Every cell of ``--grid zoology`` (:data:`ttr_edu.experiments.mqar.ZOOLOGY_GRID`) trains with Zoology's recipe: AdamW
steps on batches of 256 examples, at most ``epochs × ceil(train_examples / 256)`` of them (an early stop at 0.99
validation accuracy only shortens a cell). This script times such steps on one thread, as a cell runs on a cluster
(``--nthreads 1``), for each layer family at three widths of every task (the CPU time of ``--repeats`` steps after
one warm-up step), fits ``seconds = a + b d + c d²`` per family and task through the three widths, and prices every
cell of the grid at its step budget:

    python benchmarks/mqar_cluster_cost.py                       # measure (about half an hour), then price
    python benchmarks/mqar_cluster_cost.py --save steps.json     # keep the measurements
    python benchmarks/mqar_cluster_cost.py --load steps.json     # price again from them

It prints the seconds per step measured, the core-hours per cell by task and width, and the grid's total: an upper
bound, since early stops are not counted. ``docs/cluster.md`` quotes a run of it. Gated DeltaNet is priced as
DeltaNet, Mesa as RLS, Based-style linear attention as linear attention; two layers as twice one, two heads as one.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections import defaultdict

import torch

from ttr_edu.experiments.mqar import VARIANTS, ZOOLOGY_GRID, ZOOLOGY_TASKS
from ttr_edu.experiments.provenance import cpu_name
from ttr_edu.models.mqar import MQARModel
from ttr_edu.tasks.mqar import mqar_batch

#: the measured families and the widths each is timed at (softmax's largest width in the grid is 128)
FAMILIES = {
    "linear_attention": (16, 64, 256),
    "deltanet": (16, 64, 256),
    "rls": (16, 64, 256),
    "softmax_attention": (16, 64, 128),
}
#: the grid's other layers, priced as the family they compute like
PRICED_AS = {"gated_deltanet": "deltanet", "mesa": "rls", **{name: base for name, (base, _, _) in VARIANTS.items()}}


def seconds_per_step(model_name: str, seq_len: int, num_pairs: int, d_model: int, repeats: int) -> float:
    """CPU seconds of one AdamW step of Zoology's recipe (batch 256) on one thread."""
    torch.manual_seed(0)
    model = MQARModel(model_name, ZOOLOGY_GRID.vocab_size, d_model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    batch = mqar_batch(256, seq_len, num_pairs, ZOOLOGY_GRID.vocab_size, generator=torch.Generator().manual_seed(0))

    def step():
        loss = model.loss(batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    step()  # warm-up: first-call allocations
    start = time.process_time()
    for _ in range(repeats):
        step()
    return (time.process_time() - start) / repeats


def measure(repeats: int) -> list[dict]:
    out = []
    for seq_len, num_pairs in ZOOLOGY_TASKS:
        for family, widths in FAMILIES.items():
            for d_model in widths:
                seconds = seconds_per_step(family, seq_len, num_pairs, d_model, repeats)
                out.append(
                    {
                        "model": family,
                        "seq_len": seq_len,
                        "num_pairs": num_pairs,
                        "d_model": d_model,
                        "seconds": seconds,
                    }
                )
                print(
                    f"  {family:<18} T = {seq_len:>3}, N = {num_pairs:>2}, d = {d_model:>3}: {seconds:7.3f} s per step",
                    flush=True,
                )
    return out


def quadratic(points: list[tuple[int, float]]):
    """``d -> a + b d + c d²`` through three ``(d, seconds)`` points (Lagrange form)."""
    (x0, y0), (x1, y1), (x2, y2) = points

    def at(d: float) -> float:
        return (
            y0 * (d - x1) * (d - x2) / ((x0 - x1) * (x0 - x2))
            + y1 * (d - x0) * (d - x2) / ((x1 - x0) * (x1 - x2))
            + y2 * (d - x0) * (d - x1) / ((x2 - x0) * (x2 - x1))
        )

    return at


def price(measured: list[dict]) -> tuple[dict, float, int]:
    """Core-hours per ``(T, N, d)`` summed over the grid's cells there, the total, and the number of cells."""
    curves = {}
    by_family = defaultdict(list)
    for m in measured:
        by_family[m["model"], m["seq_len"], m["num_pairs"]].append((m["d_model"], m["seconds"]))
    for key, points in by_family.items():
        curves[key] = quadratic(sorted(points))
    hours: dict[tuple[int, int, int], float] = defaultdict(float)
    cells = ZOOLOGY_GRID.cells()
    steps = ZOOLOGY_GRID.zoology.max_steps
    for cell in cells:
        family = PRICED_AS.get(cell.model, cell.model)
        seconds = max(curves[family, cell.seq_len, cell.num_pairs](cell.d_model), 0.0) * cell.n_layers
        hours[cell.seq_len, cell.num_pairs, cell.d_model] += steps * seconds / 3600
    return dict(hours), sum(hours.values()), len(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2, help="timed steps per point (after one warm-up)")
    parser.add_argument("--save", help="write the measurements to this JSON file")
    parser.add_argument("--load", help="price from measurements saved earlier instead of measuring")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.load:
        with open(args.load) as handle:
            saved = json.load(handle)
        measured, machine = saved["measured"], saved["machine"]
    else:
        machine = f"{cpu_name()}, torch {torch.__version__}, Python {platform.python_version()}, one thread"
        print(f"seconds per AdamW step, batch 256 ({machine}):")
        measured = measure(args.repeats)
        if args.save:
            with open(args.save, "w") as handle:
                json.dump({"machine": machine, "measured": measured}, handle, indent=1)
    hours, total, count = price(measured)
    steps = ZOOLOGY_GRID.zoology.max_steps
    print(f"\none cell at its full budget of {steps} steps, core-hours (measured widths):")
    print(
        f"{'(T, N)':>10}"
        + "".join(
            f"{f'{family} d={d}':>{max(10, len(family) + 7)}}" for family, widths in FAMILIES.items() for d in widths
        )
    )
    for seq_len, num_pairs in ZOOLOGY_TASKS:
        line = f"{f'({seq_len}, {num_pairs})':>10}"
        for family, widths in FAMILIES.items():
            for d in widths:
                m = next(
                    x
                    for x in measured
                    if (x["model"], x["seq_len"], x["num_pairs"], x["d_model"]) == (family, seq_len, num_pairs, d)
                )
                line += f"{m['seconds'] * steps / 3600:>{max(10, len(family) + 7)}.2f}"
        print(line)
    print(
        f"\nthe zoology grid: {count} cells, each at most {steps} steps; core-hours by task and width (all its cells)"
    )
    widths = sorted({d for _, _, d in hours})
    print(f"{'(T, N)':>10}" + "".join(f"{f'd={d}':>8}" for d in widths) + f"{'total':>9}")
    for seq_len, num_pairs in ZOOLOGY_TASKS:
        row = [hours.get((seq_len, num_pairs, d), 0.0) for d in widths]
        print(f"{f'({seq_len}, {num_pairs})':>10}" + "".join(f"{h:>8.1f}" for h in row) + f"{sum(row):>9.0f}")
    print(f"total: {total:,.0f} core-hours at most (measured on {machine})")


if __name__ == "__main__":
    main()
