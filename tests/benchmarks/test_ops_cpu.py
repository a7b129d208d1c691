"""benchmarks/ops_cpu.py prints its new columns (fla/ours, GFLOP/s, % of the matmul rate) with fla and without."""

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "ops_cpu.py"


@pytest.fixture()
def bench():
    spec = importlib.util.spec_from_file_location("ops_cpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_flop_model_by_hand(bench):
    # one chunk of 64 tokens, one head, D = 64: linear attention 4 C² D + 4 C D², delta rule 8 C² D + 6 C D²
    assert bench.chunk_flops("linear_attention", T=64, C=64, D=64, heads=1) == 8 * 64**3
    assert bench.chunk_flops("gated_delta_rule", T=65, C=64, D=64, heads=2) == 2 * 2 * 14 * 64**3


def test_table_has_the_new_columns(bench, capsys):
    bench.main(["--T", "128", "--repeats", "1", "--layers", "gated_linear_attention", "gla"])
    out = capsys.readouterr().out
    assert "fla/ours" in out and "% mm" in out and "one-core matmul" in out and "load average" in out
    chunk_rows = [line for line in out.splitlines() if line.split()[1:2] == ["chunk"]]
    assert len(chunk_rows) == 2 and all(line.rstrip()[-1].isdigit() for line in chunk_rows)
    if bench.fla_version() is not None:  # fla is an optional benchmark dependency (the bench extra)
        assert chunk_rows[0].split()[5].endswith("x")  # a measured ratio
        assert "no fla naive chunk" in chunk_rows[1]  # per-key GLA has no naive chunk form in fla
    else:
        assert all("fla not installed" in line for line in chunk_rows)


def test_without_fla_the_column_says_so(bench, capsys, monkeypatch):
    monkeypatch.setattr(bench, "fla_version", lambda: None)
    bench.main(["--T", "64", "--repeats", "1", "--layers", "gated_linear_attention"])
    chunk_row = next(line for line in capsys.readouterr().out.splitlines() if line.split()[1:2] == ["chunk"])
    assert "fla not installed" in chunk_row
