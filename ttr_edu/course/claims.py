"""Bind the prose of a chapter to the numbers that prove it (CONTRIBUTING.md, "Claims").

A chapter states a result in two ways, and both go through this module:

* **rendered**: :func:`say` writes a sentence whose numbers are filled in from the computed values, so the text
  can never disagree with the output;
* **checked**: :func:`check` and its shorthands (:func:`between`, :func:`close`, :func:`less`, :func:`ordered`,
  :func:`slope`) test what a sentence asserts ("equal", "grows linearly", "fails at", "A beats B") and stop the
  notebook with :class:`ClaimFailed`, naming the claim, when it no longer holds.

Each checked claim shows a one-line badge ``✔ claim: <statement> (<evidence>)`` as HTML (JupyterLab, the book) and
as plain text (nbval, terminals), so a reader sees what was checked and on which numbers.

Timing claims rest on deterministic quantities (FLOP counts, bytes allocated) or on loose bounds that hold on a
loaded 2-core machine, never on a tight wall-clock threshold.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

__all__ = ["ClaimFailed", "check", "between", "close", "less", "ordered", "slope", "say", "render", "count"]


class ClaimFailed(AssertionError):
    """A sentence of the chapter no longer matches its own output; the message names the claim."""


_checked: list[str] = []


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


def check(statement: str, holds: bool, evidence: str) -> None:
    """Assert one claim of the prose and show it as checked.

    Args:
        statement: the claim as the prose makes it, e.g. ``"the delta rule solves the overwrite task"``.
        holds: whether the computed evidence supports it (a Python or NumPy/torch boolean).
        evidence: the numbers it rests on, e.g. ``"loss 0.003 ≤ 0.01"``.

    Returns ``None``, so that a cell ending with a claim shows only the badge.

    Raises:
        TypeError: ``statement`` or ``evidence`` is not a string.
        ClaimFailed: ``holds`` is false; the message gives the statement and the evidence.
    """
    if not isinstance(statement, str) or not statement:
        raise TypeError(f"statement: expected a non-empty str, got {statement!r}")
    if not isinstance(evidence, str):
        raise TypeError(f"evidence: expected a str, got {type(evidence).__name__}")
    if not bool(holds):
        raise ClaimFailed(f"claim no longer holds: {statement!r}; evidence: {evidence}")
    _checked.append(statement)
    _show(
        f'<p style="margin:0.2em 0;color:#1a7f37">✔ <b>claim checked</b>: {html.escape(statement)} '
        f'<span style="color:#57606a">({html.escape(evidence)})</span></p>',
        f"✔ claim checked: {statement} ({evidence})",
    )


def between(statement: str, value: float, low: float, high: float) -> float:
    """Claim ``low ≤ value ≤ high``; return ``value`` (as a float) for later use."""
    value = float(value)
    check(statement, low <= value <= high, f"{_fmt(value)} in [{_fmt(low)}, {_fmt(high)}]")
    return value


def close(statement: str, got: float, want: float, rtol: float) -> float:
    """Claim ``|got − want| ≤ rtol · |want|`` (or ``≤ rtol`` when ``want`` is 0); return the relative error."""
    got, want = float(got), float(want)
    error = abs(got - want) / abs(want) if want != 0 else abs(got)
    check(statement, error <= rtol, f"{_fmt(got)} vs {_fmt(want)}, relative difference {_fmt(error)} ≤ {_fmt(rtol)}")
    return error


def less(statement: str, smaller: float, larger: float, names: tuple[str, str] = ("a", "b")) -> float:
    """Claim ``smaller < larger``; ``names`` label the two numbers in the evidence. Return ``larger − smaller``."""
    smaller, larger = float(smaller), float(larger)
    check(statement, smaller < larger, f"{names[0]} = {_fmt(smaller)} < {names[1]} = {_fmt(larger)}")
    return larger - smaller


def ordered(statement: str, values: Mapping[str, float], decreasing: bool = True) -> list[str]:
    """Claim that ``values`` (name → number, in the order the prose lists them) are strictly ordered.

    Returns the names in the claimed order.
    """
    if len(values) < 2:
        raise ValueError(f"values: an order needs at least 2 entries, got {len(values)}")
    names, numbers = list(values), [float(v) for v in values.values()]
    pairs = zip(numbers, numbers[1:])
    holds = all(a > b for a, b in pairs) if decreasing else all(a < b for a, b in pairs)
    sign = " > " if decreasing else " < "
    check(statement, holds, sign.join(f"{n} {_fmt(v)}" for n, v in zip(names, numbers)))
    return names


def slope(statement: str, x: Sequence[float], y: Sequence[float], low: float, high: float) -> float:
    """Claim that ``y`` grows like ``x**p`` with ``low ≤ p ≤ high`` (least-squares slope of log y on log x).

    Returns the fitted exponent ``p``.

    Raises:
        ValueError: fewer than two points, ``x`` and ``y`` of different lengths, or a value that is not positive.
    """
    xs, ys = [float(a) for a in x], [float(b) for b in y]
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError(f"x, y: expected two sequences of equal length ≥ 2, got {len(xs)} and {len(ys)}")
    if min(xs) <= 0 or min(ys) <= 0:
        raise ValueError("x, y: a power law needs positive values")
    lx, ly = [math.log(a) for a in xs], [math.log(b) for b in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    denominator = sum((a - mx) ** 2 for a in lx)
    if denominator == 0:
        raise ValueError("x: needs at least two distinct values")
    p = sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / denominator
    check(statement, low <= p <= high, f"fitted exponent {p:.2f} in [{_fmt(low)}, {_fmt(high)}]")
    return p


def say(template: str, **values) -> None:
    """Render a sentence whose numbers come from the computation, and show it as Markdown.

    ``template`` uses ``str.format`` fields, e.g. ``say("Recall is exact up to N = {n}.", n=n_max)``; floats are
    formatted to 3 significant digits unless the field gives its own format (``{err:.1e}``).

    Returns ``None`` (the text is shown, not echoed again as a cell's value); :func:`render` gives the string.
    """
    text = render(template, **values)
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
    except ImportError:
        print(text)
        return
    if get_ipython() is None:
        print(text)
    else:
        display(Markdown(text))


def render(template: str, **values) -> str:
    """The text :func:`say` shows: ``template.format(**values)`` with floats to 3 significant digits by default."""
    return template.format(**{k: (_Number(v) if isinstance(v, float) else v) for k, v in values.items()})


class _Number(float):
    """A float whose default format is 3 significant digits (``{x}``), while ``{x:.2f}`` still works."""

    def __format__(self, spec: str) -> str:
        return _fmt(self) if not spec else float.__format__(self, spec)


def count() -> int:
    """How many claims were checked in this process (a chapter can print it in its summary)."""
    return len(_checked)
