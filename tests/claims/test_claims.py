"""The claims helper: each claim passes when its evidence holds and fails, naming itself, when it does not."""

import pytest

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


def test_shorthands_return_what_they_measured():
    assert claims.between("in range", 0.5, 0.0, 1.0) == 0.5
    assert claims.close("equal", 1.0 + 1e-9, 1.0, rtol=1e-6) < 1e-8
    assert claims.ordered("a > b > c", {"a": 3, "b": 2, "c": 1}) == ["a", "b", "c"]
    assert claims.slope("quadratic", [1, 2, 4, 8], [3, 12, 48, 192], 1.9, 2.1) == pytest.approx(2.0)


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
