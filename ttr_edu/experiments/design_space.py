"""The diagnostics of a point of the test-time-regression design space, and the grid the book ships.

Two measurements, each on three seeds, each in a second or less on a laptop CPU (chapter design_your_own_memory):

* **streaming regression** (:func:`streaming_error`): one-step-ahead prediction on a stream whose linear map switches
  once, halfway (:func:`ttr_edu.tasks.retrieval.switching_regression`, unit keys, ``D = 8``). Token ``t`` writes its
  pair and then answers the next key; the error is relative to the values' energy. Data-dependent gates read a
  boundary marker: the token where the map switches carries one (as a document separator does), and the gate there
  is the point's ``gate_switch``; elsewhere it is ``gate_rest``.
* **associative recall** (:func:`recall_accuracy`): ``N`` random unit pairs in ``D_k = D_v = 16`` are written, then
  every key is asked; a query is recalled when its answer is closer (in angle) to its own value than to every other
  stored value. A parametric memory keeps ``D_k D_v = 256`` floats whatever ``N`` (an MLP gets the hidden width with
  as many weights); a kernel method keeps every pair, so its state grows with ``N``.

``python -m ttr_edu.experiments design_space --capstone`` trains the capstone's MQAR comparison (the chapter's default
point, through the generic mixer, beside linear attention, DeltaNet and gated DeltaNet; :func:`train_capstone`) and
writes ``results/design_space_capstone.csv``.

``python -m ttr_edu.experiments design_space`` evaluates every point of the coarse grid (every choice at its default
parameters, :data:`ttr_edu.regression.design_space.PARAMS`) and writes ``results/design_space.json``, which the
book's static explorer reads (:func:`load_shipped`) so that a reader without a kernel moves through the same space.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import torch

from ttr_edu.experiments import plain_help
from ttr_edu.ops import l2_norm
from ttr_edu.regression.cost import Cost, cost, matched_hidden
from ttr_edu.regression.deep import forward as memory_forward
from ttr_edu.regression.design_space import AXES, CHOICES, Point
from ttr_edu.regression.function_classes import MLP
from ttr_edu.tasks.retrieval import switching_regression

__all__ = [
    "SEEDS",
    "STREAM_LENGTH",
    "STREAM_DIM",
    "RECALL_DIM",
    "RECALL_PAIRS",
    "Diagnostics",
    "regression_inputs",
    "streaming_error",
    "recall_accuracy",
    "exact_fit_gap",
    "diagnose",
    "grid_points",
    "entry",
    "settings",
    "precompute",
    "load_shipped",
    "CAPSTONE",
    "CAPSTONE_LABELS",
    "CAPSTONE_LRS",
    "capstone_step_seconds",
    "train_capstone",
    "load_capstone",
    "main",
]

SEEDS = (0, 1, 2)
STREAM_LENGTH = 256  # tokens; the map switches once, after the first half
STREAM_DIM = 8  # D_k = D_v of the stream
STREAM_NOISE = 0.05
RECALL_DIM = 16  # D_k = D_v of the recall task: a linear memory keeps 256 floats
RECALL_PAIRS = (4, 8, 12, 16, 20, 24, 32, 48, 64)
DTYPE = torch.float64
SHIPPED = "design_space.json"


def switch_position(length: int = STREAM_LENGTH) -> int:
    """The first token of the second regime: ``switching_regression`` with ``switch_every = T // 2 + 1`` draws
    exactly two regimes over its ``T + 1`` pairs."""
    return length // 2 + 1


def regression_inputs(point: Point, k: torch.Tensor, v: torch.Tensor, boundary: torch.Tensor | None = None) -> dict:
    """The keyword arguments the point's layer takes besides ``q, k, v``, for pairs ``k, v`` ``(B, T, 1, D)``.

    ``beta`` (stepped optimisers), ``g`` (gates: ``log gate_rest`` and ``log gate_switch`` where ``boundary``
    ``(B, T)`` is true; a gate of 0 is a reset), the MLP's starting weights (``W1`` seeded random, ``W2 = 0``: the
    memory starts at the zero function, as a linear one does, and still has a gradient),
    ``scale`` (1 for parametric classes on unit keys, the sharpness ``s`` for kernels), and, for ``k`` steps per
    token, ``k`` and ``v`` each repeated ``k`` times (the token's pair, stepped on ``k`` times).
    """
    B, T, H, D_k = k.shape
    D_v = v.shape[-1]
    weights, function_class, _ = point.objects()
    options: dict = {}
    kernel = point.function_class in ("kernel_smoother", "local_linear", "kernel_ridge")
    options["scale"] = float(point.param("sharpness")) if kernel else 1.0
    rows = point.param("steps") if point.optimizer == "steps_per_token" else 1
    if rows > 1:
        options["k"], options["v"] = k.repeat_interleave(rows, 1), v.repeat_interleave(rows, 1)
    if point.optimizer in ("online_sgd", "implicit_step", "steps_per_token", "mini_batch_gd", "momentum"):
        options["beta"] = torch.full((B, T * rows, H), float(point.param("beta")), dtype=k.dtype)
    if point.weights == "gates":
        rest, switch = (
            math.log(x) if x > 0 else -math.inf for x in (point.param("gate_rest"), point.param("gate_switch"))
        )
        g = torch.full((B, T, H), rest, dtype=k.dtype)
        if boundary is not None:
            g = g.masked_fill(boundary[..., None], switch)
        options["g"] = g
    if isinstance(function_class, MLP):
        gen = torch.Generator().manual_seed(1234)
        d_h = matched_hidden(D_k, D_v)
        W1 = torch.randn(B, H, D_k, d_h, generator=gen, dtype=k.dtype) / D_k**0.5
        W2 = torch.zeros(B, H, d_h, D_v, dtype=k.dtype)
        options["initial_state"] = (W1, W2)
    return options


def _run(point: Point, q, k, v, boundary=None, **extra):
    options = regression_inputs(point, k, v, boundary)
    k, v = options.pop("k", k), options.pop("v", v)
    return point.layer()(q, k, v, **options, **extra)


def _stream(seed: int, length: int = STREAM_LENGTH):
    s = switching_regression(
        1,
        length,
        STREAM_DIM,
        switch_every=switch_position(length),
        noise=STREAM_NOISE,
        generator=torch.Generator().manual_seed(seed),
        dtype=DTYPE,
    )
    boundary = torch.zeros(1, length, dtype=torch.bool)
    boundary[:, switch_position(length)] = True  # the token that writes the first pair of the new map
    return s.q, s.k, s.v, s.target, boundary


def _streams(seeds, length: int = STREAM_LENGTH):
    parts = [_stream(seed, length) for seed in seeds]
    return tuple(torch.cat(xs, 0) for xs in zip(*parts))  # one batch row per seed


def streaming_error(point: Point, seeds=SEEDS, length: int = STREAM_LENGTH) -> torch.Tensor:
    """Relative squared error of each one-step-ahead prediction, ``(len(seeds), T)``.

    Token ``t``'s error is ``‖y_t − v_{t+1}‖² / mean_s ‖v_{s+1}‖²`` (the stream's mean value energy, per seed).

    Raises:
        ValueError: the point makes no layer (its reason), or its outputs overflow (a step that diverges: the
            framework's ``NonFiniteError``, a ``ValueError``).
    """
    q, k, v, target, boundary = _streams(seeds, length)
    o, _ = _run(point, q, k, v, boundary)
    energy = target.pow(2).sum(-1).mean(1, keepdim=True)  # (S, 1, 1)
    return ((o - target).pow(2).sum(-1) / energy)[..., 0]


def exact_fit_gap(point: Point, seeds=SEEDS, length: int = STREAM_LENGTH) -> torch.Tensor:
    """How far each prediction is from the exact fit of the same objective, ``(len(seeds), T)``.

    The exact fit is the point with the exact solve (a ridge of ``1e-3``), the same weights and class: the
    answer an optimiser approaches. The gap is ``‖y_t − y*_t‖²`` relative to the values' energy, as
    :func:`streaming_error`. Only for points whose class has a closed form (linear or kernel classes).
    """
    exact = point.replace("optimizer", "exact_solve", ridge=1e-3)
    q, k, v, target, boundary = _streams(seeds, length)
    o, _ = _run(point, q, k, v, boundary)
    o_star, _ = _run(exact, q, k, v, boundary)
    energy = target.pow(2).sum(-1).mean(1, keepdim=True)
    return ((o - o_star).pow(2).sum(-1) / energy)[..., 0]


def _recall_pairs(seed: int, n: int):
    gen = torch.Generator().manual_seed(10_000 + 97 * seed + n)
    k = l2_norm(torch.randn(n, RECALL_DIM, generator=gen, dtype=DTYPE))
    v = l2_norm(torch.randn(n, RECALL_DIM, generator=gen, dtype=DTYPE))
    return k, v


def _answers(point: Point, k: torch.Tensor, v: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """Write the ``N`` pairs, then answer every query from the memory that holds all of them: ``(M, D_v)``."""
    weights, function_class, _ = point.objects()
    if point.weights == "window" and len(k) > point.param("window"):  # the last memory fits the last w pairs only
        w = point.param("window")
        return _answers(point.replace("weights", "uniform"), k[-w:], v[-w:], queries)
    if point.function_class in ("linear", "mlp"):  # fit once, then read the final memory at every query
        K, V = k[None, :, None], v[None, :, None]
        _, state = _run(point, K, K, V, output_final_state=True)
        if point.function_class == "linear":
            return queries @ state[0, 0]
        params = tuple(W[0:1] for W in state)
        return memory_forward(function_class, params, queries[None, None])[0, 0]
    options = regression_inputs(point, k[None, :, None], v[None, :, None])
    per_pair = {name: options[name][0, :, 0] for name in ("beta", "g") if name in options}
    return point.layer().predict(k, v, queries, scale=options["scale"], **per_pair)


def recall_accuracy(point: Point, seeds=SEEDS, pairs=RECALL_PAIRS) -> torch.Tensor:
    """The fraction of the ``N`` stored keys whose answer points to their own value, ``(len(seeds), len(pairs))``.

    Raises:
        ValueError: as :func:`streaming_error`.
    """
    accuracy = torch.empty(len(seeds), len(pairs), dtype=DTYPE)
    for (i, seed), (j, n) in itertools.product(enumerate(seeds), enumerate(pairs)):
        k, v = _recall_pairs(seed, n)
        scores = _answers(point, k, v, k) @ v.T  # (N, N): answer j against every stored value, unit values
        accuracy[i, j] = (scores.argmax(-1) == torch.arange(n)).to(DTYPE).mean()
    return accuracy


@dataclass
class Diagnostics:
    """Everything the explorer draws for one point: per-seed streaming errors and recall, the cost, and why the
    point is missing where it is (``problem``: no layer; ``diverged``: its outputs overflow)."""

    point: Point
    stream: torch.Tensor | None = None  # (seeds, T)
    recall: torch.Tensor | None = None  # (seeds, len(RECALL_PAIRS))
    stream_cost: Cost | None = None
    recall_cost: Cost | None = None
    problem: str | None = None
    diverged: str | None = None
    seconds: float = 0.0


def diagnose(point: Point, seeds=SEEDS) -> Diagnostics:
    """Both diagnostics and the cost of ``point`` (or the reason it has none), timed. The tensors are small, so they
    run on one thread (restored after): threads that share a busy CPU only wait for each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _diagnose(point, seeds)
    finally:
        torch.set_num_threads(threads)


def _diagnose(point: Point, seeds) -> Diagnostics:
    start = time.perf_counter()
    result = Diagnostics(point, problem=point.problem())
    if result.problem is None:
        result.stream_cost = cost(point, STREAM_DIM, STREAM_DIM, t=STREAM_LENGTH)
        result.recall_cost = cost(point, RECALL_DIM, RECALL_DIM, t=max(RECALL_PAIRS))
        try:
            result.stream = streaming_error(point, seeds)
            result.recall = recall_accuracy(point, seeds)
        except (ValueError, FloatingPointError) as error:  # NonFiniteError: the outputs overflowed
            result.diverged = str(error).split(";")[0]
            result.stream = result.recall = None
    result.seconds = time.perf_counter() - start
    return result


# -- the shipped grid ----------------------------------------------------------------------------------------------


def grid_points() -> list[Point]:
    """Every combination of one choice per axis at its default parameters (valid or not), in :data:`CHOICES` order."""
    return [Point.of(*keys) for keys in itertools.product(*(CHOICES[axis] for axis in AXES))]


def _summary(values: torch.Tensor) -> dict:
    """Mean, lowest and highest over seeds (rows), rounded for the JSON."""
    return {
        "mean": [round(x, 5) for x in values.mean(0).tolist()],
        "low": [round(x, 5) for x in values.min(0).values.tolist()],
        "high": [round(x, 5) for x in values.max(0).values.tolist()],
    }


def smooth(errors: torch.Tensor, width: int = 8) -> torch.Tensor:
    """A trailing running mean over ``width`` tokens of each row (the first tokens average what exists)."""
    csum = torch.cat([errors.new_zeros(errors.shape[0], 1), errors.cumsum(1)], 1)
    idx = torch.arange(1, errors.shape[1] + 1)
    lo = (idx - width).clamp(min=0)
    return (csum[:, idx] - csum[:, lo]) / (idx - lo)


def entry(d: Diagnostics, every: int = 4) -> dict:
    """One point's diagnostics as plain numbers (the shipped grid's format, which the figures draw): its choices
    and parameters, ``problem``/``diverged``, the streaming error smoothed over 8 tokens and kept every ``every``-th
    token (mean, lowest and highest seed), the recall (the same) and both costs."""
    point = d.point
    out = {"weights": point.weights, "function_class": point.function_class, "optimizer": point.optimizer}
    out["params"] = dict(point.params)
    out["problem"], out["diverged"] = d.problem, d.diverged
    if d.stream is not None:
        out["stream"] = _summary(smooth(d.stream)[:, every - 1 :: every].clamp(max=1e3))
        out["recall"] = _summary(d.recall)
    if d.stream_cost is not None:
        out["cost"] = {"stream": vars(d.stream_cost), "recall": vars(d.recall_cost)}
    return out


def precompute(points=None, seeds=SEEDS, progress=None) -> dict:
    """The diagnostics of every point of ``points`` (default :func:`grid_points`) as a JSON-ready dict:
    the settings, and one :func:`entry` per point."""
    points = grid_points() if points is None else points
    entries = []
    for point in points:
        d = diagnose(point, seeds)
        entries.append(entry(d))
        if progress:
            progress(point, d)
    return {"settings": settings(seeds), "points": entries}


def settings(seeds=SEEDS, every: int = 4) -> dict:
    """The settings of both diagnostics, as the figures label them."""
    return {
        "seeds": list(seeds),
        "stream": {
            "length": STREAM_LENGTH,
            "dim": STREAM_DIM,
            "switch": switch_position(),
            "noise": STREAM_NOISE,
            "tokens": list(range(every, STREAM_LENGTH + 1, every)),
        },
        "recall": {"dim": RECALL_DIM, "pairs": list(RECALL_PAIRS)},
    }


# -- the capstone's MQAR comparison ----------------------------------------------------------------------------------

#: The chapter's MQAR setting: one layer of width ``d_model`` and one head (a ``d × d`` state for every linear
#: memory: matched state), ``num_pairs`` pairs in ``seq_len`` tokens of a ``vocab`` of tokens, Adam for ``steps``.
CAPSTONE = {"vocab": 64, "seq_len": 64, "num_pairs": 12, "d_model": 8, "steps": 1000, "batch": 32}
#: The learning rates tried on seed 0; the better one trains every seed (as chapter associative_recall chooses).
CAPSTONE_LRS = (1e-2, 3e-3)
#: The shipped comparison: the registered mixer -> its label.
CAPSTONE_LABELS = {
    "linear_attention": "linear attention",
    "deltanet": "DeltaNet",
    "gated_deltanet": "gated DeltaNet",
    "point": "gated implicit step (generic path)",
}
#: The shipped run's fourth model: the chapter's first default point. On a mixer's unit keys it is gated DeltaNet at
#: the step β/(1+β), so the capstone's checks now refuse it; the run keeps it as such a reparametrised layer.
CAPSTONE_POINT = Point.of("gates", "linear", "implicit_step")
CAPSTONE_SHIPPED = "design_space_capstone.csv"


def _mqar_accuracy(mixer: str, seed: int, lr: float) -> float:
    from ttr_edu.models.mqar import MQARModel
    from ttr_edu.tasks.mqar import mqar_batch
    from ttr_edu.train import train

    c = CAPSTONE
    torch.manual_seed(seed)
    model = MQARModel(mixer, c["vocab"], c["d_model"])

    def sample(generator):
        return mqar_batch(c["batch"], c["seq_len"], c["num_pairs"], c["vocab"], generator=generator)

    train(model, sample, max_steps=c["steps"], lr=lr, target_loss=None, eval_every=250, seed=seed, progress=False)
    test = mqar_batch(512, c["seq_len"], c["num_pairs"], c["vocab"], generator=torch.Generator().manual_seed(10_000))
    return float(model.accuracy(test))


def capstone_step_seconds(mixer: str, steps: int = 3) -> float:
    """Seconds of one training step (forward, backward, Adam) of the registered mixer ``mixer`` in the chapter's MQAR
    setting (:data:`CAPSTONE`), on this machine: the median of ``steps`` steps after one warm-up step. Multiply by
    ``CAPSTONE["steps"]`` and the number of runs for the time :func:`train_capstone` takes.

    Raises:
        ValueError: ``steps`` is not an integer ≥ 1.
    """
    from ttr_edu.models.mqar import MQARModel
    from ttr_edu.tasks.mqar import mqar_batch

    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps: expected an integer >= 1, got {steps!r}")
    c = CAPSTONE
    torch.manual_seed(0)
    model = MQARModel(mixer, c["vocab"], c["d_model"])
    optimizer = torch.optim.Adam(model.parameters(), lr=CAPSTONE_LRS[0])
    batch = mqar_batch(c["batch"], c["seq_len"], c["num_pairs"], c["vocab"], generator=torch.Generator().manual_seed(0))
    seconds = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        optimizer.zero_grad()
        model.loss(batch).backward()
        optimizer.step()
        seconds.append(time.perf_counter() - start)
    return float(sorted(seconds[1:])[len(seconds[1:]) // 2])


def train_capstone(mixer: str, label: str | None = None, seeds=SEEDS, lrs=CAPSTONE_LRS) -> list[dict]:
    """Train the registered mixer ``mixer`` in the chapter's MQAR setting (:data:`CAPSTONE`): each learning rate on
    the first seed, then every seed at the better one. Returns one row per seed: ``model``, ``label``, ``lr``,
    ``seed``, ``accuracy`` (on 512 held-out examples)."""
    scores = {lr: _mqar_accuracy(mixer, seeds[0], lr) for lr in lrs}
    lr = max(lrs, key=lambda x: scores[x])
    rows = []
    for seed in seeds:
        accuracy = scores[lr] if seed == seeds[0] else _mqar_accuracy(mixer, seed, lr)
        rows.append({"model": mixer, "label": label or mixer, "lr": lr, "seed": seed, "accuracy": round(accuracy, 4)})
    return rows


def load_capstone() -> list[dict]:
    """The shipped comparison (``results/design_space_capstone.csv``): rows as :func:`train_capstone` returns."""
    text = resources.files("ttr_edu.experiments").joinpath("results", CAPSTONE_SHIPPED).read_text()
    rows = list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))
    return [{**r, "lr": float(r["lr"]), "seed": int(r["seed"]), "accuracy": float(r["accuracy"])} for r in rows]


def capstone_main(out: Path) -> int:
    """Train the shipped comparison and write it to ``out`` (a CSV under a line that says how it was made)."""
    from ttr_edu.layers import register_point

    register_point("point", CAPSTONE_POINT, replace=True)
    rows = []
    for mixer, label in CAPSTONE_LABELS.items():
        rows += train_capstone(mixer, label)
        print(f"{label:<40} {[r['accuracy'] for r in rows[-len(SEEDS) :]]} at lr {rows[-1]['lr']}", flush=True)
    with open(out, "w", newline="") as f:
        f.write(f"# python -m ttr_edu.experiments design_space --capstone; setting {CAPSTONE}; lrs {CAPSTONE_LRS}\n")
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {out}")
    return 0


def load_shipped() -> dict:
    """The grid that ships with the package (``results/design_space.json``), as :func:`precompute` returns it."""
    return json.loads(resources.files("ttr_edu.experiments").joinpath("results", SHIPPED).read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ttr_edu.experiments design_space",
        description=plain_help(__doc__.split("\n\n")[-1]),
    )
    results = Path(__file__).with_name("results")
    parser.add_argument(
        "--capstone",
        action="store_true",
        help="train the capstone's MQAR comparison (the default point beside DeltaNet and linear attention) instead",
    )
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: the shipped file)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.capstone:
        return capstone_main(args.out or results / CAPSTONE_SHIPPED)
    args.out = args.out or results / SHIPPED

    def progress(point, d):
        status = d.problem and "no layer" or d.diverged and "diverged" or "ok"
        print(f"{point.describe():<80} {status:<9} {d.seconds:5.2f} s", flush=True)

    data = precompute(progress=progress)
    args.out.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"wrote {args.out}")
    return 0
