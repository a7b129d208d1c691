"""The language-model grid: rows carry their corpus, a rerun resumes, another corpus's rows are refused."""

import pytest

from ttr_edu.experiments import lm, runner
from ttr_edu.tasks.text import load_stdlib_corpus

TINY = lm.LMGrid(
    mixers=("linear", "softmax"),
    seeds=(0,),
    d_model=16,
    num_heads=1,
    n_layers=1,
    seq_len=16,
    batch_size=2,
    steps=3,
    eval_windows=2,
)


@pytest.mark.slow
def test_grid_writes_rows_resumes_and_refuses_another_corpus(tmp_path):
    out = tmp_path / "grid.csv"
    rows = lm.run_grid(TINY, out, progress=False)
    assert [r["mixer"] for r in rows] == ["linear", "softmax"]
    assert all(r["corpus_sha256"] == load_stdlib_corpus().sha256 and r["diverged"] == 0 for r in rows)
    assert all(0 < r["valid_bpb"] < 9 for r in rows)  # an untrained byte model is near log2(256) = 8 bits
    again = lm.run_grid(TINY, out, progress=False)  # nothing left to train: the same rows, none appended
    assert [r["valid_bpb"] for r in again] == [float(r["valid_bpb"]) for r in rows]
    assert len(lm.load_results(out)) == 2
    text = out.read_text()
    out.write_text(text.replace(load_stdlib_corpus().sha256, "0" * 64, 1))  # the header's recipe: another corpus
    with pytest.raises(runner.ResumeRefused, match=r"another recipe \(corpus_sha256: \"0000"):
        lm.run_grid(TINY, out, progress=False)


def test_the_recipe_holds_the_corpus():
    recipe = lm.recipe(TINY)
    assert recipe["corpus_sha256"] == load_stdlib_corpus().sha256 and recipe["seq_len"] == 16 and "mixers" not in recipe


def test_shipped_grid_is_complete_and_of_one_recipe():
    rows = lm.load_results()
    cells = {(r["mixer"], r["seed"]) for r in rows}
    assert cells == set(lm.FULL_GRID.cells())
    assert {(r["d_model"], r["n_layers"], r["seq_len"], r["steps"]) for r in rows} == {
        (lm.FULL_GRID.d_model, lm.FULL_GRID.n_layers, lm.FULL_GRID.seq_len, lm.FULL_GRID.steps)
    }
