"""Bind the prose of a chapter to the numbers that prove it (CONTRIBUTING.md, "Claims").

A chapter states a result in two ways, and both go through this module:

* **rendered**: :func:`say` writes a sentence whose numbers are filled in from the computed values, so the text
  can never disagree with the output;
* **checked**: :func:`check` and its shorthands (:func:`between`, :func:`close`, :func:`less`, :func:`ordered`,
  :func:`slope`, :func:`trend`) test what a sentence asserts ("equal", "grows linearly", "fails at", "A beats B")
  and stop the notebook with :class:`ClaimFailed`, naming the claim, when it no longer holds.

Each checked claim shows a one-line badge ``✔ claim checked: <statement> (<evidence>)`` as HTML (JupyterLab, the
book) and as plain text (nbval, terminals), so a reader sees what was checked and on which numbers. Every helper
returns ``None``, so a cell that ends with a claim shows the badge and nothing else. When a claim fails, its
evidence states what was found, with the relation that actually holds ("relative error = 4.54 ≥ bound = 1e-12"),
never the one the claim needed.

Claims across seeds
-------------------
A claim about a random experiment rests on several runs, at least :data:`MIN_SEEDS` (3) seeds. Wherever a helper
takes a number it also takes a sequence with **one number per seed** (a list, a tuple, a 1-D NumPy array or torch
tensor); a plain number next to it is a constant shared by every seed. Seeds are paired by position, so seed ``i``
of one quantity is compared with seed ``i`` of the other.

* :func:`less`, :func:`between` and :func:`close` hold when they hold **in every seed**. The badge counts the seeds
  and gives the tightest one: ``(a < b in 3 of 3 seeds, smallest gap 0.04; a 0.12 ± 0.01, b 0.19 ± 0.02, mean ± sd
  over seeds)``.
* :func:`less` and :func:`ordered` take ``margin=m``: every seed's gap must exceed ``m``. For a quantity whose single
  seeds may swap while the average difference is clear, ``standard_errors=z`` replaces "every seed" by "the mean gap
  exceeds ``m`` plus ``z`` standard errors of the difference of the means" (unpaired; the standard error comes from
  the spread over seeds).
* :func:`trend` fits a line (a power law on log-log axes, a growth rate on semi-log axes, or a plain slope) to all
  points of all seeds (one common slope, one level per seed), with a Student-t confidence interval for the slope,
  and holds only when the **whole interval** lies inside the claimed range. "The gap shrinks" (``high=0``) therefore
  fails when the interval admits growth.
  :func:`slope` is the same fit without an interval, for deterministic quantities (FLOP counts, bytes).
* A custom claim goes through :func:`each` when it was decided in every seed separately (one bool per seed; the
  badge says "in k of n seeds"), or through :func:`check` with ``pooled_over=n`` when one verdict was computed from
  the runs of n seeds together (a pooled count, a median across seeds): that badge says "pooled over n seeds, not
  checked in each", so a pooled verdict never reads as a per-seed one.
* With fewer than :data:`MIN_SEEDS` seeds a claim across seeds fails. Where three seeds do not fit the time budget,
  pass single numbers and let the prose say "in this run".

:func:`spread` renders ``mean ± sd`` of per-seed numbers for :func:`say`; :func:`count` tells how many claims were
checked, and how many of them across seeds.

Timing claims rest on deterministic quantities (FLOP counts, bytes allocated) or on loose bounds that hold on a
loaded 2-core machine, never on a tight wall-clock threshold.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Mapping, Sequence

from ttr_edu._internal.progress import BOOK_ENV

__all__ = [
    "MIN_SEEDS",
    "ClaimFailed",
    "check",
    "each",
    "between",
    "close",
    "less",
    "ordered",
    "slope",
    "trend",
    "say",
    "show_markdown",
    "render",
    "spread",
    "count",
]

#: The fewest seeds a claim across seeds may rest on.
MIN_SEEDS = 3


class ClaimFailed(AssertionError):
    """A sentence of the chapter no longer matches its own output; the message names the claim."""


#: (statement, number of seeds it rests on; 1 for a single run) of every claim checked in this process.
_checked: list[tuple[str, int]] = []


def _show(html_text: str, plain_text: str) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # plain Python: the text alone
        print(plain_text)
        return
    if get_ipython() is None:
        print(plain_text)
    else:
        display({"text/html": html_text, "text/plain": plain_text}, raw=True)


def _fmt(value: float) -> str:
    value = float(value)
    if value == 0 or math.isnan(value) or math.isinf(value):
        return str(value)
    return f"{value:.3g}" if 1e-3 <= abs(value) < 1e4 else f"{value:.2e}"


def _term(name: str | None, value: float) -> str:
    """``name = value``, or the value alone when the name only repeats it (``"0.1"`` for 0.1)."""
    if name is None:
        return _fmt(value)
    try:
        repeats = math.isclose(float(name), float(value), rel_tol=1e-9, abs_tol=0.0)
    except ValueError:
        repeats = False
    return _fmt(value) if repeats or name == _fmt(value) else f"{name} = {_fmt(value)}"


def _truth(holds) -> bool:
    """``holds`` as a bool: a Python bool, a NumPy bool or a one-element bool tensor; nothing else is a verdict (a
    string ``"False"``, a list ``[False]``, a NaN or a function passed uncalled are all truthy)."""
    if isinstance(holds, bool):
        return holds
    dtype, shape = getattr(holds, "dtype", None), getattr(holds, "shape", None)
    if dtype is not None and shape is not None and str(dtype) in ("bool", "torch.bool"):
        if math.prod(shape) != 1:
            raise TypeError(f"holds: expected one verdict, got a bool array of shape {tuple(shape)}; use .all()")
        return bool(holds.item() if hasattr(holds, "item") else holds)
    raise TypeError(f"holds: expected a bool (the result of a comparison), got {type(holds).__name__} {holds!r}")


def _record(statement: str, holds: bool, evidence: str, seeds: int) -> None:
    if not isinstance(statement, str) or not statement:
        raise TypeError(f"statement: expected a non-empty str, got {statement!r}")
    if not isinstance(evidence, str):
        raise TypeError(f"evidence: expected a str, got {type(evidence).__name__}")
    if not _truth(holds):
        raise ClaimFailed(f"claim no longer holds: {statement!r}; evidence: {evidence}")
    _checked.append((statement, seeds))
    _show(
        f'<p style="margin:0.2em 0;color:#1a7f37">✔ <b>claim checked</b>: {html.escape(statement)} '
        f'<span style="color:#57606a">({html.escape(evidence)})</span></p>',
        f"✔ claim checked: {statement} ({evidence})",
    )


def check(statement: str, holds: bool, evidence: str, *, pooled_over: int | None = None, seeds: object = None) -> None:
    """Assert one claim of the prose and show it as checked.

    Args:
        statement: the claim as the prose makes it, e.g. ``"the delta rule solves the overwrite task"``.
        holds: whether the computed evidence supports it (a Python or NumPy/torch boolean).
        evidence: the numbers it rests on, e.g. ``"loss 0.003 ≤ 0.01"``.
        pooled_over: for one verdict computed from the runs of several seeds together (a count pooled over the
            seeds, a median across them, ranges over seeds that overlap): the number of seeds. The badge says
            "pooled over n seeds, not checked in each", and :func:`count` counts it as resting on n seeds. A verdict
            reached in every seed separately goes through :func:`each` instead.
        seeds: no longer accepted (it let a pooled verdict read "in each of 3 seeds"); a ``TypeError`` says what to
            use instead.

    Returns ``None``, so that a cell ending with a claim shows only the badge.

    Raises:
        TypeError: ``statement`` or ``evidence`` is not a string, ``pooled_over`` not an int, or ``seeds`` given.
        ClaimFailed: ``holds`` is false, or ``pooled_over`` is below :data:`MIN_SEEDS`; the message gives the
            statement and the evidence.
    """
    if seeds is not None:
        raise TypeError(
            "seeds: check() no longer takes seeds=; pass one verdict per seed to claims.each(statement, verdicts, "
            "evidence), or pooled_over=n for one verdict computed from n seeds together (a pooled count, a median)"
        )
    if pooled_over is None:
        _record(statement, holds, evidence, 1)
        return
    if not isinstance(pooled_over, int) or isinstance(pooled_over, bool) or pooled_over < 1:
        raise TypeError(f"pooled_over: expected a positive int (the number of seeds), got {pooled_over!r}")
    if pooled_over < MIN_SEEDS:
        _too_few_seeds(statement, pooled_over, MIN_SEEDS)
    _record(statement, holds, f"{evidence}; pooled over {pooled_over} seeds, not checked in each", pooled_over)


def each(statement: str, verdicts, evidence: str) -> None:
    """Assert a claim that must hold in every seed, from one verdict per seed computed by the caller.

    Args:
        statement: the claim as the prose makes it.
        verdicts: one bool per seed (a list or tuple), each reached from that seed's runs alone.
        evidence: the numbers the verdicts rest on.

    The claim holds when every verdict is true; the badge says "in k of n seeds". With fewer than
    :data:`MIN_SEEDS` verdicts it fails.

    Raises:
        TypeError: ``verdicts`` is not a list or tuple of bools.
        ClaimFailed: a seed's verdict is false, or there are fewer than :data:`MIN_SEEDS` of them.
    """
    if not isinstance(verdicts, (list, tuple)):
        raise TypeError(f"verdicts: expected one bool per seed (a list or tuple), got {type(verdicts).__name__}")
    per_seed = [_truth(v) for v in verdicts]
    n = len(per_seed)
    if n < MIN_SEEDS:
        _too_few_seeds(statement, n, MIN_SEEDS)
    if all(per_seed):
        _record(statement, True, f"{evidence}; in {n} of {n} seeds", n)
    else:
        failing = ", ".join(str(i) for i, ok in enumerate(per_seed) if not ok)
        _record(
            statement,
            False,
            f"{evidence}; in only {sum(per_seed)} of {n} seeds (needed all {n}): fails at seed index {failing}",
            n,
        )


# ----------------------------------------------------------------------------------------------- per-seed values


def _number(value, name: str) -> float:
    """One number as a float; a bool, a string or anything else that only converts is refused, and so is NaN."""
    if (
        isinstance(value, (bool, str, bytes))
        or getattr(value, "dtype", None) is not None
        and str(value.dtype)
        in (
            "bool",
            "torch.bool",
        )
    ):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__} {value!r}")
    if isinstance(value, complex) or getattr(value, "is_complex", lambda: False)():
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__} {value!r}")
    try:
        number = float(value)
    except OverflowError:
        raise ValueError(f"{name}: {value!r} is too large for a float") from None
    except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of more than one element
        raise TypeError(f"{name}: expected a number, got {type(value).__name__}") from None
    if math.isnan(number):
        raise ValueError(f"{name}: got NaN, which no claim can rest on")
    return number


def _seeds_of(value, name: str) -> list[float] | None:
    """``None`` for a single number, else the per-seed numbers as floats (a 1-D sequence, array or tensor)."""
    if isinstance(value, (str, bytes, Mapping)):
        raise TypeError(f"{name}: expected a number or one number per seed, got {type(value).__name__}")
    if hasattr(value, "ndim") and hasattr(value, "tolist"):  # NumPy array or torch tensor
        if value.ndim == 0:
            return None
        if value.ndim != 1:
            raise ValueError(f"{name}: expected one number per seed, shape (seeds,), got shape {tuple(value.shape)}")
        return [_number(v, name) for v in value.tolist()]
    if isinstance(value, Sequence):
        return [_number(v, name) for v in value]
    _number(value, name)
    return None


def _align(**quantities) -> tuple[int | None, dict[str, list[float]]]:
    """Broadcast single numbers against per-seed sequences: (number of seeds or None, name -> per-seed floats)."""
    per_seed = {name: _seeds_of(value, name) for name, value in quantities.items()}
    lengths = {len(v) for v in per_seed.values() if v is not None}
    if len(lengths) > 1:
        raise ValueError(
            "one number per seed: the sequences differ in length ("
            + ", ".join(f"{name}: {len(v)}" for name, v in per_seed.items() if v is not None)
            + ")"
        )
    if not lengths:
        return None, {name: [_number(value, name)] for name, value in quantities.items()}
    n = lengths.pop()
    if n == 0:
        raise ValueError("one number per seed: got an empty sequence")
    return n, {name: (v if v is not None else [_number(quantities[name], name)] * n) for name, v in per_seed.items()}


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def spread(values, spec: str | None = None) -> str:
    """``"mean ± sd"`` of per-seed numbers (sample standard deviation), for :func:`say`.

    ``spec`` formats both numbers (``".2f"``); by default 3 significant digits.
    """
    numbers = _seeds_of(values, "values")
    if numbers is None:
        numbers = [float(values)]
    mean, sd = _mean_sd(numbers)
    show = _fmt if spec is None else (lambda x: format(x, spec))
    return f"{show(mean)} ± {show(sd)}"


def _summary(name: str | None, values: list[float], constant: bool) -> str:
    if constant:
        return _term(name, values[0])
    return f"{name + ' ' if name else ''}{spread(values)}"


def _too_few_seeds(statement: str, n: int, seeds: int) -> None:
    _record(
        statement,
        False,
        f"rests on {n} seed{'s' if n != 1 else ''}; a claim across seeds needs at least {seeds}",
        n,
    )


# ---------------------------------------------------------------------------------------------------- shorthands


def between(statement: str, value, low: float, high: float) -> None:
    """Claim ``low ≤ value ≤ high``; with one value per seed, in every seed."""
    n, v = _align(value=value)
    low, high = _number(low, "low"), _number(high, "high")
    if low > high:
        raise ValueError(f"low, high: expected low <= high, got {_fmt(low)} > {_fmt(high)}")
    if n is None:
        x = v["value"][0]
        holds = low <= x <= high
        _record(statement, holds, f"{_fmt(x)} {'in' if holds else 'outside'} [{_fmt(low)}, {_fmt(high)}]", 1)
        return
    if n < MIN_SEEDS:
        _too_few_seeds(statement, n, MIN_SEEDS)
    inside = [low <= x <= high for x in v["value"]]
    lo, hi = min(v["value"]), max(v["value"])
    if all(inside):
        evidence = f"in {n} of {n} seeds: {_fmt(lo)} to {_fmt(hi)}, inside [{_fmt(low)}, {_fmt(high)}]"
    else:
        worst = next(i for i, ok in enumerate(inside) if not ok)
        evidence = (
            f"in only {sum(inside)} of {n} seeds (needed all {n}): seed index {worst} gives "
            f"{_fmt(v['value'][worst])}, outside [{_fmt(low)}, {_fmt(high)}]; range {_fmt(lo)} to {_fmt(hi)}"
        )
    _record(statement, all(inside), evidence, n)


def close(statement: str, got, want, rtol: float) -> None:
    """Claim ``|got − want| ≤ rtol · |want|`` (``≤ rtol`` when ``want`` is 0); with per-seed values, in every seed."""
    n, v = _align(got=got, want=want)
    rtol = _number(rtol, "rtol")
    if rtol < 0:
        raise ValueError(f"rtol: expected a tolerance >= 0, got {_fmt(rtol)}")

    def error(g: float, w: float) -> float:
        return abs(g - w) / abs(w) if w != 0 else abs(g)

    errors = [error(g, w) for g, w in zip(v["got"], v["want"])]
    if n is None:
        ok = errors[0] <= rtol
        _record(
            statement,
            ok,
            f"{_fmt(v['got'][0])} vs {_fmt(v['want'][0])}, relative difference {_fmt(errors[0])} "
            f"{'≤' if ok else '>'} {_fmt(rtol)}",
            1,
        )
        return
    if n < MIN_SEEDS:
        _too_few_seeds(statement, n, MIN_SEEDS)
    ok = [e <= rtol for e in errors]
    want_text = _summary(None, v["want"], _seeds_of(want, "want") is None)
    got_text = spread(v["got"])
    if all(ok):
        evidence = (
            f"in {n} of {n} seeds: relative difference at most {_fmt(max(errors))} ≤ {_fmt(rtol)} "
            f"({got_text} vs {want_text}, mean ± sd over seeds)"
        )
    else:
        worst = max(range(n), key=errors.__getitem__)
        evidence = (
            f"in only {sum(ok)} of {n} seeds (needed all {n}): seed index {worst} differs by "
            f"{_fmt(errors[worst])} > {_fmt(rtol)} ({_fmt(v['got'][worst])} vs {_fmt(v['want'][worst])})"
        )
    _record(statement, all(ok), evidence, n)


def _pair_evidence(
    a: str | None, b: str | None, xa: list[float], xb: list[float], const_a: bool, const_b: bool, sign: str
) -> str:
    return f"{_summary(a, xa, const_a)}{sign}{_summary(b, xb, const_b)}"


def less(
    statement: str,
    smaller,
    larger,
    names: tuple[str, str] = ("a", "b"),
    *,
    margin: float = 0.0,
    standard_errors: float | None = None,
) -> None:
    """Claim ``smaller + margin < larger``; ``names`` label the two quantities in the evidence.

    With one number per seed on either side the claim must hold in every seed (paired by position), or, with
    ``standard_errors=z``, the mean gap must exceed ``margin + z`` standard errors of the difference of the means.

    Raises:
        ClaimFailed: the claim does not hold, or it rests on fewer than :data:`MIN_SEEDS` seeds.
        ValueError: per-seed sequences of different lengths.
    """
    if not (isinstance(names, (tuple, list)) and len(names) == 2 and all(isinstance(x, str) for x in names)):
        raise TypeError(f"names: expected two labels (str, str), got {names!r}")
    n, v = _align(smaller=smaller, larger=larger)
    a, b = names
    margin = _number(margin, "margin")
    xa, xb = v["smaller"], v["larger"]
    const_a, const_b = _seeds_of(smaller, "smaller") is None, _seeds_of(larger, "larger") is None
    if n is None:
        gap = xb[0] - xa[0]
        ok = gap > margin
        if margin == 0:
            evidence = f"{_term(a, xa[0])}{' < ' if ok else ' ≥ '}{_term(b, xb[0])}"
        else:
            evidence = (
                f"{_term(a, xa[0])}, {_term(b, xb[0])}: gap {_fmt(gap)} {'>' if ok else '≤'} margin {_fmt(margin)}"
            )
        _record(statement, ok, evidence, 1)
        return
    if n < MIN_SEEDS:
        _too_few_seeds(statement, n, MIN_SEEDS)
    if standard_errors is not None:
        ok, evidence = _by_standard_errors(
            [(a, xa, const_a), (b, xb, const_b)], margin, _number(standard_errors, "standard_errors")
        )
        _record(statement, ok, evidence, n)
        return
    gaps = [y - x for x, y in zip(xa, xb)]
    wins = [g > margin for g in gaps]
    smallest = min(range(n), key=gaps.__getitem__)
    values = _pair_evidence(a, b, xa, xb, const_a, const_b, ", ") + " (mean ± sd over seeds)"
    if const_a != const_b:  # one side a constant (a bound): the seeds' summary, then the constant, each named
        varying, spread_of, value = (b, xb, xa[0]) if const_a else (a, xa, xb[0])
        values = f"{_summary(varying, spread_of, False)} (mean ± sd over seeds), against the constant {_fmt(value)}"
    need = f" > margin {_fmt(margin)}" if margin else ""
    if all(wins):
        evidence = f"{a} < {b} in {n} of {n} seeds, smallest gap {_fmt(gaps[smallest])}{need}; {values}"
    else:
        with_margin = f", with margin {_fmt(margin)}" if margin else ""
        evidence = (
            f"{a} < {b} in only {sum(wins)} of {n} seeds (needed all {n}{with_margin}); "
            f"smallest gap {_fmt(gaps[smallest])} at seed index {smallest}; {values}"
        )
    _record(statement, all(wins), evidence, n)


def _by_standard_errors(entries: list[tuple[str, list[float], bool]], margin: float, z: float) -> tuple[bool, str]:
    """Each neighbour pair's mean gap must exceed ``margin + z`` standard errors of the difference of the means."""
    ok_all, worst = True, math.inf
    for (_, xa, ca), (_, xb, cb) in zip(entries, entries[1:]):
        ma, sa = _mean_sd(xa)
        mb, sb = _mean_sd(xb)
        se = math.sqrt((0.0 if ca else sa**2 / len(xa)) + (0.0 if cb else sb**2 / len(xb)))
        gap = mb - ma - margin
        score = math.inf if se == 0 and gap > 0 else (-math.inf if se == 0 else gap / se)
        worst = min(worst, score)
        ok_all &= score > z
    values = ", ".join(_summary(name, xs, c) for name, xs, c in entries)
    shown = "∞" if math.isinf(worst) and worst > 0 else f"{worst:.1f}"
    sign = ">" if ok_all else "≤"
    extra = f" beyond the margin {_fmt(margin)}" if margin else ""
    return ok_all, (f"smallest mean gap{extra} = {shown} standard errors {sign} {z:g}; {values} (mean ± sd over seeds)")


def ordered(
    statement: str,
    values: Mapping[str, object],
    decreasing: bool = True,
    *,
    margin: float = 0.0,
    standard_errors: float | None = None,
) -> None:
    """Claim that ``values`` (name → number, or name → one number per seed), in the order the prose lists them, are
    strictly ordered: decreasing by default, increasing with ``decreasing=False``.

    Per seed the order must hold in every seed with every neighbour gap above ``margin``; with ``standard_errors=z``
    each neighbour pair's mean gap must instead exceed ``margin + z`` standard errors.

    Raises:
        ValueError: fewer than 2 entries, or per-seed sequences of different lengths.
        ClaimFailed: the order does not hold, or it rests on fewer than :data:`MIN_SEEDS` seeds.
    """
    if not isinstance(values, Mapping):
        raise TypeError(
            f"values: expected a mapping name -> number (in the prose's order), got {type(values).__name__}"
        )
    if len(values) < 2:
        raise ValueError(f"values: an order needs at least 2 entries, got {len(values)}")
    if not isinstance(decreasing, bool):
        raise TypeError(f"decreasing: expected True or False, got {type(decreasing).__name__} {decreasing!r}")
    keys = [f"values[{name!r}]" for name in values]  # how an error names an entry
    n, v = _align(**dict(zip(keys, values.values())))
    names = list(values)
    series = [v[key] for key in keys]
    constants = [_seeds_of(x, key) is None for key, x in zip(keys, values.values())]
    # Work with "increasing" gaps: b − a for an increasing claim, a − b for a decreasing one.
    direction = -1.0 if decreasing else 1.0
    sign = " > " if decreasing else " < "
    margin = _number(margin, "margin")
    if n is None:
        numbers = [s[0] for s in series]
        gaps = [direction * (b - a) for a, b in zip(numbers, numbers[1:])]
        ok = all(g > margin for g in gaps)
        chain = f"{names[0]} {_fmt(numbers[0])}"
        for name, x, g in zip(names[1:], numbers[1:], gaps):
            chain += (sign if g > margin else (" ≤ " if decreasing else " ≥ ")) + f"{name} {_fmt(x)}"
        if margin:
            chain += f" (every gap {'>' if ok else 'not all >'} margin {_fmt(margin)})"
        if not ok:
            chain += f"; needed {sign.join(names)}"
        _record(statement, ok, chain, 1)
        return
    if n < MIN_SEEDS:
        _too_few_seeds(statement, n, MIN_SEEDS)
    if standard_errors is not None:
        oriented = [[direction * x for x in s] for s in series]
        entries = [(name, s, c) for name, s, c in zip(names, oriented, constants)]
        ok, evidence = _by_standard_errors(entries, margin, _number(standard_errors, "standard_errors"))
        if decreasing:  # show the numbers as measured, not negated
            shown = ", ".join(_summary(name, s, c) for name, s, c in zip(names, series, constants))
            evidence = evidence.rsplit("; ", 1)[0] + f"; {shown} (mean ± sd over seeds)"
        _record(statement, ok, evidence, n)
        return
    per_seed_gaps = [[direction * (series[j + 1][i] - series[j][i]) for j in range(len(names) - 1)] for i in range(n)]
    wins = [all(g > margin for g in gaps) for gaps in per_seed_gaps]
    smallest_seed = min(range(n), key=lambda i: min(per_seed_gaps[i]))
    pair = min(range(len(names) - 1), key=lambda j: per_seed_gaps[smallest_seed][j])
    smallest = per_seed_gaps[smallest_seed][pair]
    shown = ", ".join(_summary(name, s, c) for name, s, c in zip(names, series, constants))
    order = sign.join(names)
    need = f" > margin {_fmt(margin)}" if margin else ""
    if all(wins):
        evidence = f"{order} in {n} of {n} seeds, smallest gap {_fmt(smallest)}{need}; {shown}"
    else:
        evidence = (
            f"{order} in only {sum(wins)} of {n} seeds (needed all {n}); smallest gap {_fmt(smallest)} between "
            f"{names[pair]} and {names[pair + 1]} at seed index {smallest_seed}; {shown}"
        )
    _record(statement, all(wins), evidence + " (mean ± sd over seeds)", n)


# ------------------------------------------------------------------------------------------------------- fits

_SCALES = {
    "loglog": ("exponent", True, True),
    "semilogy": ("rate", False, True),
    "linear": ("slope", False, False),
}


def _fit_points(x, y, scale: str) -> tuple[list[float], list[float], int]:
    """The (x, y) points of the fit on the axes of ``scale`` and the number of runs (seeds) they come from."""
    if scale not in _SCALES:
        raise ValueError(f"scale: expected one of {', '.join(_SCALES)}, got {scale!r}")
    _, log_x, log_y = _SCALES[scale]
    xs = [float(a) for a in (x.tolist() if hasattr(x, "tolist") else x)]
    rows = y.tolist() if hasattr(y, "tolist") else list(y)
    if rows and all(isinstance(r, Sequence) and not isinstance(r, str) for r in rows):
        runs = [[float(b) for b in r] for r in rows]
    else:
        runs = [[float(b) for b in rows]]
    for r in runs:
        if len(r) != len(xs):
            raise ValueError(
                f"x, y: expected {len(xs)} values of y per run (one per x), got {len(r)}; "
                "pass y as one sequence, or as one row per seed"
            )
    if len(xs) < 2:
        raise ValueError(f"x, y: expected two sequences of equal length ≥ 2, got {len(xs)} and {len(runs[0])}")
    if log_x and min(xs) <= 0 or log_y and min(min(r) for r in runs) <= 0:
        raise ValueError("x, y: a power law needs positive values" if log_x else "y: a log scale needs positive values")
    fx = [math.log(a) if log_x else a for a in xs]
    px = [a for _ in runs for a in fx]
    py = [math.log(b) if log_y else b for r in runs for b in r]
    return px, py, len(runs)


def _least_squares(px: list[float], py: list[float], runs: int = 1) -> tuple[float, float]:
    """Slope and its standard error (0 for an exact fit) of the least-squares line through ``runs`` runs that share
    their x values (``px`` and ``py`` run after run): one slope, and one level (intercept) per run, since seeds may
    differ in level while the trend is common."""
    n = len(px)
    per_run = n // runs
    xs = px[:per_run]
    mx = sum(xs) / per_run
    sxx = runs * sum((a - mx) ** 2 for a in xs)
    if sxx == 0:
        raise ValueError("x: needs at least two distinct values")
    levels = [sum(py[r * per_run : (r + 1) * per_run]) / per_run for r in range(runs)]
    centred = [(a - mx, b - levels[i // per_run]) for i, (a, b) in enumerate(zip(px, py))]
    p = sum(a * b for a, b in centred) / sxx
    dof = n - runs - 1
    if dof <= 0:
        return p, 0.0
    residual = sum((b - p * a) ** 2 for a, b in centred)
    return p, math.sqrt(residual / dof / sxx)


def slope(statement: str, x: Sequence[float], y: Sequence[float], low: float, high: float) -> None:
    """Claim that ``y`` grows like ``x**p`` with ``low ≤ p ≤ high`` (least-squares slope of log y on log x).

    For deterministic quantities (FLOP counts, bytes, exact formulas); measured, noisy data go through
    :func:`trend`, which also fits the uncertainty.

    Raises:
        ValueError: fewer than two points, ``x`` and ``y`` of different lengths, or a value that is not positive.
    """
    px, py, _ = _fit_points(x, y, "loglog")
    p, _ = _least_squares(px, py)
    low, high = _number(low, "low"), _number(high, "high")
    ok = low <= p <= high
    _record(statement, ok, f"fitted exponent {p:.2f} {'in' if ok else 'outside'} [{_fmt(low)}, {_fmt(high)}]", 1)


def trend(
    statement: str,
    x: Sequence[float],
    y,
    low: float = -math.inf,
    high: float = math.inf,
    *,
    scale: str = "loglog",
    confidence: float = 0.95,
) -> None:
    """Claim that the slope of ``y`` against ``x`` lies in ``[low, high]``, with the fit's uncertainty.

    Args:
        statement: the claim as the prose makes it.
        x: the points, e.g. the numbers of passes.
        y: one value per point (one run), or one row per seed, ``(seeds, points)``.
        low, high: the claimed range of the slope; leave one open for "increases" (``low=0``) or "decreases"
            (``high=0``).
        scale: ``"loglog"`` (power-law exponent: log y on log x), ``"semilogy"`` (growth rate per unit of x: log y
            on x; geometric decay is a straight line here) or ``"linear"`` (y on x).
        confidence: the level of the Student-t interval for the slope, from the residuals of the least-squares fit
            through all points of all seeds: one common slope, one level (intercept) per seed.

    The claim holds only when the whole interval lies inside ``[low, high]``: it fails when the data admit the
    opposite conclusion. With one row per seed it needs at least :data:`MIN_SEEDS` rows.

    Raises:
        ValueError: an unknown ``scale``, rows of the wrong length, fewer than 3 points in all, or values a log
            scale cannot take.
        ClaimFailed: the interval leaves ``[low, high]``, or the rows come from fewer than :data:`MIN_SEEDS` seeds.
    """
    from scipy.special import stdtrit  # Student-t quantiles; scipy comes with scikit-learn

    low, high, confidence = _number(low, "low"), _number(high, "high"), _number(confidence, "confidence")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence: expected a level between 0 and 1, e.g. 0.95, got {_fmt(confidence)}")
    px, py, runs = _fit_points(x, y, scale)
    if len(px) - runs - 1 < 1:
        raise ValueError(
            f"x, y: a trend with an interval needs more points than runs + 1, got {len(px)} points in {runs} run(s)"
        )
    if 1 < runs < MIN_SEEDS:
        _too_few_seeds(statement, runs, MIN_SEEDS)
    p, se = _least_squares(px, py, runs)
    half = float(stdtrit(len(px) - runs - 1, 0.5 + confidence / 2)) * se
    lo, hi = p - half, p + half
    ok = low <= lo and hi <= high
    name = _SCALES[scale][0]
    claimed = (
        f"[{_fmt(low)}, {_fmt(high)}]"
        if math.isfinite(low) and math.isfinite(high)
        else (f"above {_fmt(low)}" if math.isfinite(low) else f"below {_fmt(high)}")
    )
    where = "inside" if ok else "not inside"
    if not (math.isfinite(low) and math.isfinite(high)):
        where = "entirely" if ok else "not entirely"
    source = f"{runs} seeds" if runs > 1 else "1 run"
    _record(
        statement,
        ok,
        f"fitted {name} {p:.3g}, {confidence:.0%} interval [{lo:.3g}, {hi:.3g}] {where} {claimed}; "
        f"{source} × {len(px) // runs} points",
        runs,
    )


# ---------------------------------------------------------------------------------------------------- rendering


def say(template: str, **values) -> None:
    """Render a sentence whose numbers come from the computation, and show it as Markdown.

    ``template`` uses ``str.format`` fields, e.g. ``say("Recall is exact up to N = {n}.", n=n_max)``; floats are
    formatted to 3 significant digits unless the field gives its own format (``{err:.1e}``). Per-seed numbers are
    rendered with :func:`spread` beforehand (``spread=claims.spread(values)``).

    In JupyterLab the text is a Markdown output, which jupyterlab-myst renders, maths included. While the book builds
    (``TTR_EDU_BOOK`` set, :mod:`ttr_edu.course.book`) it is HTML instead (:func:`markdown_html`): the book's theme
    renders an HTML output and typesets the maths in it with MathJax, but shows a Markdown output as raw text.

    Returns ``None`` (the text is shown, not echoed again as a cell's value); :func:`render` gives the string.
    """
    show_markdown(render(template, **values))


def show_markdown(text: str) -> None:
    """Show Markdown text as :func:`say` shows its sentences: a Markdown output in JupyterLab, HTML while the book
    builds (where a Markdown output would appear as raw text), printed outside IPython. For tables and descriptions a
    cell builds itself; use it instead of ``display(Markdown(...))``.

    Raises:
        TypeError: ``text`` is not a str.
    """
    if not isinstance(text, str):
        raise TypeError(f"text: expected a str of Markdown, got {type(text).__name__}")
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
    except ImportError:
        print(text)
        return
    if get_ipython() is None:
        print(text)
    elif os.environ.get(BOOK_ENV, "0") not in ("", "0"):
        display({"text/html": markdown_html(text), "text/plain": text}, raw=True)
    else:
        display(Markdown(text))


def markdown_html(text: str) -> str:
    """Markdown as HTML, its maths kept for a typesetter: ``$x$`` becomes ``<span class="math">\\(x\\)</span>``
    and ``$$x$$`` a ``<div class="math">`` (mistune's math plugin), so underscores in maths are not read as emphasis.
    Raw HTML in the text is escaped."""
    import mistune

    return mistune.create_markdown(escape=True, plugins=["math", "strikethrough", "table"])(text)


def render(template: str, **values) -> str:
    """The text :func:`say` shows: ``template.format(**values)`` with floats to 3 significant digits by default.

    Raises:
        TypeError: ``template`` is not a str. ValueError: a field of the template has no value (named), or the
            template is malformed.
    """
    if not isinstance(template, str):
        raise TypeError(f"template: expected a str with {{fields}}, got {type(template).__name__}")
    try:
        return template.format(**{k: (_Number(v) if isinstance(v, float) else v) for k, v in values.items()})
    except KeyError as missing:
        raise ValueError(
            f"template: no value given for the field {missing}; pass it as {missing.args[0]}=..."
        ) from None
    except (IndexError, ValueError) as error:
        raise ValueError(f"template: cannot be formatted ({error}); name every field and pass its value") from None


class _Number(float):
    """A float whose default format is 3 significant digits (``{x}``), while ``{x:.2f}`` still works."""

    def __format__(self, spec: str) -> str:
        return _fmt(self) if not spec else float.__format__(self, spec)


def count(across_seeds: bool = False) -> int:
    """How many claims were checked in this process; with ``across_seeds=True``, how many of them rest on at least
    :data:`MIN_SEEDS` seeds: held in each seed, fitted over all seeds (:func:`trend`), or pooled over them
    (``check(..., pooled_over=n)``). A chapter can print both in its summary."""
    if across_seeds:
        return sum(1 for _, seeds in _checked if seeds >= MIN_SEEDS)
    return len(_checked)
