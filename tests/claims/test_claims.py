"""The claims helper: each claim passes when its evidence holds and fails, naming itself, when it does not."""

import math
import re

import numpy as np
import pytest
import torch

from ttr_edu.course import claims


def test_check_passes_and_shows_the_claim(capsys):
    assert claims.check("two is more than one", 2 > 1, "2 > 1") is None  # a cell ending on a claim shows the badge only
    assert "✔ claim checked: two is more than one (2 > 1)" in capsys.readouterr().out


def test_failing_claim_names_itself_and_its_evidence():
    with pytest.raises(claims.ClaimFailed, match=r"'recall is exact'.*evidence: error 0\.5"):
        claims.check("recall is exact", False, "error 0.5")


@pytest.mark.parametrize(
    "call",
    [
        lambda: claims.between("in range", 1.5, 0.0, 1.0),
        lambda: claims.close("equal", 1.1, 1.0, rtol=0.05),
        lambda: claims.less("a below b", 2.0, 1.0),
        lambda: claims.ordered("a > b > c", {"a": 3, "b": 1, "c": 2}),
        lambda: claims.ordered("a < b", {"a": 1, "b": 1}, decreasing=False),  # a tie is not an order
        lambda: claims.slope("linear", [1, 2, 4, 8], [1, 4, 16, 64], 0.8, 1.2),  # quadratic
    ],
)
def test_each_shorthand_fails_when_its_claim_is_false(call):
    with pytest.raises(claims.ClaimFailed):
        call()


def test_every_helper_returns_none_so_a_cell_prints_only_the_badge(capsys):
    # Today's cells end on a claim; a returned float would be echoed as a stray 9.99e-13 under the badge.
    calls = [
        claims.between("in range", 0.5, 0.0, 1.0),
        claims.close("equal", 1.0 + 1e-9, 1.0, rtol=1e-6),
        claims.less("a below b", 1.0, 2.0),
        claims.ordered("a > b > c", {"a": 3, "b": 2, "c": 1}),
        claims.slope("quadratic", [1, 2, 4, 8], [3, 12, 48, 192], 1.9, 2.1),
        claims.trend("quadratic", [1, 2, 4, 8], [3, 12, 48, 192], 1.9, 2.1),
        claims.less("a below b in every seed", [1, 2, 3], [2, 3, 4]),
    ]
    assert calls == [None] * len(calls)
    assert capsys.readouterr().out.count("✔ claim checked") == len(calls)


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(TypeError, match="statement"):
        claims.check("", True, "x")
    with pytest.raises(ValueError, match="positive"):
        claims.slope("s", [1, 2], [0, 1], 0, 1)
    with pytest.raises(ValueError, match="at least 2"):
        claims.ordered("o", {"a": 1})


def test_say_renders_numbers_from_values(capsys):
    assert (
        claims.render("error {err}, exact {n} keys, {p:.1f}", err=0.000123456, n=16, p=1.234)
        == "error 1.23e-04, exact 16 keys, 1.2"
    )
    assert claims.say("{x} and {y}", x=0.5, y="text") is None
    assert capsys.readouterr().out == "0.5 and text\n"


def test_show_markdown_is_html_in_the_book_and_markdown_in_jupyterlab(monkeypatch):
    """A table a cell builds itself reaches the book as HTML (a Markdown output would show as raw text there)."""
    import IPython.display

    shown = []
    monkeypatch.setattr("IPython.get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: shown.append(obj))
    table = "| a | $x_t$ |\n|---|---|\n| 1 | 2 |"
    monkeypatch.setenv(claims.BOOK_ENV, "1")
    claims.show_markdown(table)
    assert "<table>" in shown[-1]["text/html"] and "\\(x_t\\)" in shown[-1]["text/html"]
    monkeypatch.setenv(claims.BOOK_ENV, "0")
    claims.show_markdown(table)
    assert isinstance(shown[-1], IPython.display.Markdown) and shown[-1].data == table
    with pytest.raises(TypeError, match="text"):
        claims.show_markdown(["not", "text"])


@pytest.mark.parametrize(
    ("call", "reads"),
    [
        (lambda: claims.less("tiny", 4.54, 1e-12, names=("relative error", "bound")), "relative error = 4.54 ≥ bound"),
        (lambda: claims.between("in range", 1.5, 0.0, 1.0), "1.5 outside [0.0, 1]"),
        (lambda: claims.close("equal", 1.1, 1.0, rtol=0.05), "relative difference 0.1 > 0.05"),
        (lambda: claims.slope("linear", [1, 2, 4], [1, 4, 16], 0.8, 1.2), "fitted exponent 2.00 outside"),
        (lambda: claims.ordered("a > b", {"a": 1, "b": 2}), "a 1 ≤ b 2; needed a > b"),
    ],
)
def test_a_failed_claim_states_what_was_found_not_what_was_claimed(call, reads):
    # The review's "relative error = 4.54 < 1e-12" read as if the claim held.
    with pytest.raises(claims.ClaimFailed) as failure:
        call()
    assert reads in str(failure.value)


def test_a_name_that_only_repeats_its_number_is_not_printed_twice(capsys):
    claims.less("the sum rule does not", 0.1, 0.259, ("0.1", "sum"))
    assert "(0.1 < sum = 0.259)" in capsys.readouterr().out


# --- claims across seeds: each helper passes a true case and fails a counterexample, naming itself ---------------


def test_less_across_seeds_holds_in_every_seed_and_shows_the_seeds(capsys):
    claims.less("A beats B", [0.10, 0.12, 0.11], [0.20, 0.16, 0.18], names=("A", "B"))
    out = capsys.readouterr().out
    assert "A < B in 3 of 3 seeds, smallest gap 0.04" in out and "mean ± sd over seeds" in out
    with pytest.raises(claims.ClaimFailed, match=r"'A beats B'.*in only 2 of 3 seeds.*seed index 2"):
        claims.less("A beats B", [0.10, 0.12, 0.21], [0.20, 0.16, 0.18], names=("A", "B"))


def test_less_against_a_constant_names_the_constant_apart_from_the_seeds(capsys):
    # review r35b: "error 1.38e-07 ± 2.64e-09, 1.00e-05 (mean ± sd over seeds)" read the bound as a second statistic
    claims.less("it stays small", [1.3e-7, 1.4e-7, 1.4e-7], 1e-5, names=("error", "1e-5"))
    out = capsys.readouterr().out
    assert "(mean ± sd over seeds), against the constant 1.00e-05" in out and ", 1.00e-05 (mean" not in out
    claims.less("it is far off", 1.0, [119.0, 80.0, 170.0], names=("1", "error"))
    assert "error 123 ± 45.1 (mean ± sd over seeds), against the constant 1)" in capsys.readouterr().out


def test_less_across_seeds_with_a_margin():
    claims.less("A beats B by 0.05", [0.1, 0.1, 0.1], [0.2, 0.2, 0.16], margin=0.05)
    with pytest.raises(claims.ClaimFailed, match="margin"):
        claims.less("A beats B by 0.05", [0.1, 0.1, 0.1], [0.2, 0.2, 0.14], margin=0.05)


def test_less_by_standard_errors_uses_the_spread_over_seeds():
    # One seed swaps, but the means are clearly apart: 'every seed' fails, 3 standard errors hold.
    a, b = [0.10, 0.11, 0.30, 0.12, 0.10], [0.40, 0.42, 0.28, 0.41, 0.43]
    with pytest.raises(claims.ClaimFailed):
        claims.less("A below B in every seed", a, b)
    claims.less("A below B on average", a, b, standard_errors=3)
    with pytest.raises(claims.ClaimFailed, match="standard errors ≤ 3"):  # the same means, a wider spread
        claims.less("A below B on average", [0.0, 0.1, 0.6], [0.2, 0.5, 0.3], standard_errors=3)


def test_ordered_across_seeds():
    claims.ordered(
        "ν=1 < ν=2 < ν=3", {"ν=1": [0.5, 0.6, 0.55], "ν=2": [0.7, 0.75, 0.7], "ν=3": [0.8, 0.9, 0.85]}, decreasing=False
    )
    with pytest.raises(claims.ClaimFailed, match="between ν=2 and ν=3 at seed index 1"):
        claims.ordered(
            "ν=1 < ν=2 < ν=3",
            {"ν=1": [0.5, 0.6, 0.55], "ν=2": [0.7, 0.9, 0.7], "ν=3": [0.8, 0.85, 0.85]},
            decreasing=False,
        )


def test_between_and_close_across_seeds():
    claims.between("ratio in [2, 10]", [2.5, 3.9, 9.0], 2, 10)
    with pytest.raises(claims.ClaimFailed, match="seed index 2 gives 11"):
        claims.between("ratio in [2, 10]", [2.5, 3.9, 11.0], 2, 10)
    claims.close("about 4", [3.9, 4.1, 4.05], 4.0, rtol=0.05)
    with pytest.raises(claims.ClaimFailed, match="seed index 1 differs by 0.1 > 0.05"):
        claims.close("about 4", [3.9, 4.4, 4.05], 4.0, rtol=0.05)


def test_a_claim_across_seeds_needs_at_least_three():
    with pytest.raises(claims.ClaimFailed, match="rests on 2 seeds; a claim across seeds needs at least 3"):
        claims.less("A beats B", [0.1, 0.1], [0.2, 0.2])
    with pytest.raises(ValueError, match="differ in length"):
        claims.less("A beats B", [0.1, 0.1, 0.1], [0.2, 0.2])


def test_trend_fails_when_its_interval_admits_the_opposite():
    x = [1, 2, 4, 8, 16]
    falling = [[1.0, 0.52, 0.26, 0.12, 0.065], [1.0, 0.49, 0.24, 0.13, 0.06], [1.0, 0.5, 0.25, 0.125, 0.0625]]
    claims.trend("the gap falls like 1/n", x, falling, -1.1, -0.9)
    # Pure noise around a flat line: the point estimate may be negative, the interval reaches above 0.
    flat = [[1.0, 0.9, 1.1, 0.95, 1.0], [1.1, 1.0, 0.9, 1.05, 0.97], [0.95, 1.05, 1.0, 0.9, 1.02]]
    with pytest.raises(claims.ClaimFailed, match="interval .* not entirely below"):
        claims.trend("the gap falls", x, flat, high=0.0)


def test_trend_on_semilog_axes_tells_geometric_from_power_decay():
    n = [1, 2, 3, 4, 5, 6, 7, 8]
    geometric = [0.5**k for k in n]
    power = [k**-2.0 for k in n]
    claims.trend("geometric: a constant rate on semi-log axes", n, geometric, -0.70, -0.68, scale="semilogy")
    with pytest.raises(claims.ClaimFailed):  # a power law bends on semi-log axes: its rate is not constant
        claims.trend("a constant rate on semi-log axes", n, power, -0.70, -0.68, scale="semilogy")


def test_trend_needs_three_seeds_when_given_rows():
    with pytest.raises(claims.ClaimFailed, match="rests on 2 seeds"):
        claims.trend("grows", [1, 2, 3], [[1, 2, 3], [1, 2, 3.1]], low=0.0)
    with pytest.raises(ValueError, match="one per x"):
        claims.trend("grows", [1, 2, 3], [[1, 2], [1, 2], [1, 2]], low=0.0)


def test_count_tells_claims_across_seeds_apart():
    before, before_seeds = claims.count(), claims.count(across_seeds=True)
    claims.less("single run", 1, 2)
    claims.less("three seeds", [1, 1, 1], [2, 2, 2])
    assert claims.count() == before + 2
    assert claims.count(across_seeds=True) == before_seeds + 1


def test_spread_renders_mean_and_sd():
    assert claims.spread([1.0, 2.0, 3.0]) == "2 ± 1"
    assert claims.spread([0.1, 0.2, 0.3], ".2f") == "0.20 ± 0.10"


def test_each_checks_one_verdict_per_seed(capsys):
    before = claims.count(across_seeds=True)
    claims.each("every memory fails before its d_dot", [True, True, True], "first failures 10, 10, 12 < 16")
    assert "in 3 of 3 seeds" in capsys.readouterr().out
    assert claims.count(across_seeds=True) == before + 1
    with pytest.raises(claims.ClaimFailed, match=r"in only 2 of 3 seeds .*seed index 1"):
        claims.each("every memory fails before its d_dot", [True, False, True], "…")
    with pytest.raises(claims.ClaimFailed, match="rests on 2 seeds"):
        claims.each("every memory fails before its d_dot", [True, True], "…")
    with pytest.raises(TypeError, match="verdicts"):
        claims.each("x", True, "y")
    with pytest.raises(TypeError, match="holds: expected a bool"):
        claims.each("x", ["True", True, True], "y")


def test_a_pooled_verdict_says_so_and_never_reads_as_per_seed(capsys):
    # Review: a count pooled over 3 seeds (4 of 6 runs solved, two seeds solving only 1 of 2) was labelled
    # "in each of 3 seeds". seeds= is gone; a pooled verdict is declared as one.
    before = claims.count(across_seeds=True)
    claims.check("most quick runs are solved", True, "4 of 6 runs", pooled_over=3)
    out = capsys.readouterr().out
    assert "pooled over 3 seeds, not checked in each" in out and "in each of" not in out
    assert claims.count(across_seeds=True) == before + 1
    with pytest.raises(TypeError, match="no longer takes seeds="):
        claims.check("most quick runs are solved", True, "4 of 6 runs", seeds=3)
    with pytest.raises(claims.ClaimFailed, match="rests on 2 seeds"):
        claims.check("x", True, "y", pooled_over=2)
    with pytest.raises(TypeError, match="pooled_over"):
        claims.check("x", True, "y", pooled_over=0)


# -- bad input: named errors, never a verdict from something that is not one ----------------------------------------


@pytest.mark.parametrize("holds", ["False", [False], float("nan"), lambda: False, 1, None])
def test_a_verdict_that_is_not_a_bool_is_refused_by_name(holds):
    with pytest.raises(TypeError, match="holds: expected a bool"):
        claims.check("a claim", holds, "evidence")


def test_numpy_and_one_element_torch_verdicts_are_read():
    import numpy as np
    import torch

    claims.check("a numpy verdict", np.bool_(True), "e")
    claims.check("a torch verdict", torch.tensor(True), "e")
    with pytest.raises(claims.ClaimFailed):
        claims.check("a false torch verdict", torch.tensor([False]), "e")
    with pytest.raises(TypeError, match="one verdict"):
        claims.check("two verdicts", torch.tensor([True, False]), "e")


@pytest.mark.parametrize("value", [True, "0.5", b"0.5", [0.5, "x", 0.5]])
def test_a_value_that_is_not_a_number_is_refused_by_name(value):
    with pytest.raises(TypeError, match="value: expected a number"):
        claims.between("a claim", value, 0.0, 1.0)


def test_nan_is_no_evidence():
    with pytest.raises(ValueError, match="NaN"):
        claims.less("a claim", float("nan"), 1.0)


def test_malformed_calls_name_their_argument():
    with pytest.raises(TypeError, match="names: expected two labels"):
        claims.less("a claim", 1.0, 2.0, names=("x",))
    with pytest.raises(TypeError, match="values: expected a mapping"):
        claims.ordered("a claim", [3.0, 2.0, 1.0])
    with pytest.raises(ValueError, match="no value given for the field 'missing'"):
        claims.render("{missing}")
    with pytest.raises(TypeError, match="template: expected a str"):
        claims.say(3)


# -- every number a claim takes is checked by name: the input classes of the public-API fuzz ---------------------------

BROKEN_NUMBERS = {
    "str": "0",
    "str_nan": "nan",
    "bool": True,
    "nan": math.nan,
    "numpy_nan": np.float64("nan"),
    "tensor_nan": torch.tensor(math.nan),
    "huge_int": 10**400,
    "complex": 1 + 1j,
    "list": [0.5],
    "none": None,
}
CLAIMS_WITH_NUMBERS = {  # (call with every argument valid, taking the one to break by name)
    "between.value": lambda x: claims.between("s", x, 0.0, 1.0),
    "between.low": lambda x: claims.between("s", 0.5, x, 1.0),
    "between.high": lambda x: claims.between("s", 0.5, 0.0, x),
    "close.got": lambda x: claims.close("s", x, 1.0, rtol=0.1),
    "close.want": lambda x: claims.close("s", 1.0, x, rtol=0.1),
    "close.rtol": lambda x: claims.close("s", 1.0, 1.0, rtol=x),
    "less.smaller": lambda x: claims.less("s", x, 2.0, names=("a", "b")),
    "less.margin": lambda x: claims.less("s", 1.0, 2.0, names=("a", "b"), margin=x),
    "ordered.values": lambda x: claims.ordered("s", {"a": 2.0, "b": x}),
    "ordered.margin": lambda x: claims.ordered("s", {"a": 2.0, "b": 1.0}, margin=x),
    "slope.low": lambda x: claims.slope("s", [1, 2, 4, 8], [1, 2, 4, 8], x, 2.0),
    "trend.high": lambda x: claims.trend("s", [1, 2, 4, 8], [1, 2, 4, 8], 0.0, x, scale="linear"),
    "trend.confidence": lambda x: claims.trend("s", [1, 2, 4, 8], [1, 2, 4.1, 8], 0, 2, scale="linear", confidence=x),
}


PER_SEED = {"between.value", "close.got", "close.want", "less.smaller", "ordered.values"}  # a list is one per seed


@pytest.mark.parametrize(
    "where, broken",
    [(w, b) for w in sorted(CLAIMS_WITH_NUMBERS) for b in sorted(BROKEN_NUMBERS) if b != "list" or w not in PER_SEED],
)
def test_a_broken_number_is_refused_by_name(where, broken):
    name = where.split(".")[1]
    with pytest.raises((TypeError, ValueError)) as refused:
        CLAIMS_WITH_NUMBERS[where](BROKEN_NUMBERS[broken])
    assert re.match(rf"{name}(\[[^\]]+\])?: ", str(refused.value)), str(refused.value)


@pytest.mark.parametrize("same", [np.float64(0.5), np.float32(0.5), torch.tensor(0.5), np.int64(0)], ids=repr)
def test_numpy_and_torch_scalars_count_as_the_numbers_they_are(same):
    claims.between("a NumPy or torch scalar is a number", same, 0.0, 1.0)
    claims.between("as a bound too", 0.75, same, 1.0)


def test_the_direction_of_an_order_is_a_bool():
    for wrong in ("false", 0, None, [False]):
        with pytest.raises(TypeError, match="^decreasing: "):
            claims.ordered("s", {"a": 1.0, "b": 2.0}, decreasing=wrong)
