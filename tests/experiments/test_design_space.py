"""The design-space diagnostics: what they measure, and that the grid shipped for the book is what the code computes."""

import json

import torch

from ttr_edu.experiments import design_space as ds
from ttr_edu.regression.design_space import Point, named_point

SAMPLE = [
    named_point("deltanet"),
    named_point("mesa"),
    named_point("softmax_attention"),
    named_point("ttt_mlp"),
    Point.of("window", "linear", "implicit_step"),
    Point.of("decay", "kernel_ridge", "exact_solve"),
]


def test_the_shipped_grid_is_what_the_code_computes():
    shipped = ds.load_shipped()
    assert shipped["settings"] == ds.settings()
    points = ds.grid_points()
    assert [(e["weights"], e["function_class"], e["optimizer"]) for e in shipped["points"]] == [
        (p.weights, p.function_class, p.optimizer) for p in points
    ]
    by_key = {(e["weights"], e["function_class"], e["optimizer"]): e for e in shipped["points"]}
    for point in SAMPLE:
        fresh = ds.entry(ds.diagnose(point))
        old = by_key[(point.weights, point.function_class, point.optimizer)]
        assert old["params"] == fresh["params"] and old["cost"] == fresh["cost"]
        for part in ("stream", "recall"):
            for stat in ("mean", "low", "high"):
                assert torch.allclose(torch.tensor(old[part][stat]), torch.tensor(fresh[part][stat]), atol=2e-5)
    for entry, point in zip(shipped["points"], points):
        assert entry["problem"] == point.problem()


def test_the_diagnostics_measure_what_they_say():
    d = ds.diagnose(named_point("deltanet"))
    assert d.stream.shape == (3, ds.STREAM_LENGTH) and d.recall.shape == (3, len(ds.RECALL_PAIRS))
    switch = ds.switch_position()
    before, after = d.stream[:, switch - 32 : switch].mean(), d.stream[:, switch : switch + 8].mean()
    assert after > 10 * before  # the map switches once, halfway
    cache = ds.diagnose(named_point("softmax_attention"))  # a kernel smoother keeps every pair: recall stays exact
    assert bool((cache.recall == 1).all())
    exact = ds.recall_accuracy(Point.of("uniform", "linear", "exact_solve", ridge=1e-3), pairs=(16,))
    assert bool((exact == 1).all())  # D_k = 16 random unit keys: the exact solve recalls each one
    window = ds.recall_accuracy(Point.of("window", "kernel_smoother", "exact_solve", window=8), pairs=(32,))
    assert torch.allclose(window, torch.full_like(window, 8 / 32))  # only the last w pairs are held
    gap = ds.exact_fit_gap(Point.of("gates", "linear", "exact_solve", ridge=1e-3))
    assert float(gap.abs().max()) < 1e-20


def test_a_point_that_diverges_or_makes_no_layer_says_so():
    diverged = ds.diagnose(Point.of("uniform", "mlp", "online_sgd", beta=16.0))
    assert diverged.diverged and diverged.stream is None and diverged.stream_cost is not None
    assert "o:" in diverged.diverged
    none = ds.diagnose(Point.of("uniform", "kernel_smoother", "online_sgd"))
    assert none.problem.startswith("optimizer:") and none.stream is None and none.stream_cost is None
    assert "problem" in ds.entry(none) and "stream" not in ds.entry(none)


def test_a_new_function_class_draws_where_the_old_step_diverges():
    """A browser test found: DeltaNet's step β = 0.5 diverges on the MLP memory, so moving DeltaNet to the MLP must take
    the MLP's own step, which converges."""
    assert ds.diagnose(Point.of("uniform", "mlp", "online_sgd", beta=0.5)).diverged
    moved = ds.diagnose(named_point("deltanet").replace("function_class", "mlp"))
    assert moved.diverged is None and moved.stream is not None and bool(moved.stream.isfinite().all())


def test_gates_close_at_the_switch_only():
    point = Point.of("gates", "linear", "online_sgd", gate_rest=0.99, gate_switch=0.0)
    q, k, v, target, boundary = ds._streams((0,))
    g = ds.regression_inputs(point, k, v, boundary)["g"]
    assert bool(torch.isneginf(g[0, ds.switch_position(), 0]))
    assert torch.allclose(g[0, : ds.switch_position(), 0], torch.full((ds.switch_position(),), 0.99).log().double())


def test_the_command_writes_the_grid(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ds, "grid_points", lambda: SAMPLE[:2])
    out = tmp_path / "grid.json"
    assert ds.main(["--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [e["optimizer"] for e in data["points"]] == ["online_sgd", "exact_solve"]
    assert "wrote" in capsys.readouterr().out


def test_the_shipped_capstone_run_has_every_model_on_every_seed():
    rows = ds.load_capstone()
    labels = {r["label"] for r in rows}
    assert labels == set(ds.CAPSTONE_LABELS.values())
    for label in labels:
        mine = [r for r in rows if r["label"] == label]
        assert [r["seed"] for r in mine] == list(ds.SEEDS)
        assert len({r["lr"] for r in mine}) == 1 and mine[0]["lr"] in ds.CAPSTONE_LRS
        assert all(0 <= r["accuracy"] <= 1 for r in mine)


def test_a_capstone_run_picks_its_learning_rate_on_the_first_seed(monkeypatch):
    monkeypatch.setitem(ds.CAPSTONE, "steps", 3)
    tried = []

    def fake(mixer, seed, lr):
        tried.append((seed, lr))
        return {1e-2: 0.2, 3e-3: 0.5}[lr] + seed / 100

    monkeypatch.setattr(ds, "_mqar_accuracy", fake)
    rows = ds.train_capstone("deltanet", label="DeltaNet")
    assert tried == [(0, 1e-2), (0, 3e-3), (1, 3e-3), (2, 3e-3)]  # both rates on seed 0, then the better one
    assert [(r["seed"], r["lr"], r["accuracy"]) for r in rows] == [(0, 3e-3, 0.5), (1, 3e-3, 0.51), (2, 3e-3, 0.52)]
