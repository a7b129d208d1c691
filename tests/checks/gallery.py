"""Shared by the chapters' check tests: run a check on an answer and read its verdict, PASS or the failure's words."""

import contextlib
import io

from ttr_edu.checks import CheckFailed


def verdict(check, answer) -> tuple[bool, str]:
    """``(True, the PASS line)`` when ``check(answer)`` passes, ``(False, the message)`` when it fails or is not
    attempted: what a student reads under the cell."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            passed = check(answer)
    except CheckFailed as failure:
        return False, str(failure)
    return passed is True, printed.getvalue()


def passes_or_names(check, answer, *words: str) -> str:
    """Assert that a right answer written differently passes, or fails with a message naming every one of ``words``
    (the difference, e.g. its dtype); return the message."""
    passed, message = verdict(check, answer)
    assert passed or all(word in message for word in words), message
    return message


def assert_passes(check, answer) -> None:
    """Assert that ``check(answer)`` passes with its PASS line (a right answer written differently)."""
    passed, message = verdict(check, answer)
    assert passed and message.startswith("PASS"), message
