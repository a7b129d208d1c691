"""The ``pip install`` line that adds an extra to *this* installation of ttr-edu, in a form that works today.

``pip install 'ttr-edu[course]'`` works only once ttr-edu is published; until then a newcomer has a clone (installed
editable) or a wheel built from it, and pip needs that same clone or wheel to add an extra. pip records where it
installed ttr-edu from in ``direct_url.json`` (PEP 610), which names the clone's folder or the wheel's file.
"""

from __future__ import annotations

import json
import shlex
from importlib import metadata
from urllib.parse import unquote, urlparse

__all__ = ["pip_install_extra"]


def pip_install_extra(extra: str) -> str:
    """``pip install ...`` adding the extra ``extra`` (``"course"``, ``"cluster"``, ...) to this installation: from the
    clone it was installed from (``pip install -e '/path/to/clone[course]'`` for an editable install), from the wheel
    it was installed from (``pip install '/path/to/ttr_edu-0.1.0-py3-none-any.whl[course]'``), or from an index
    (``pip install 'ttr-edu[course]'``) when pip recorded no local source.

    Raises:
        TypeError: ``extra`` is not a str.
    """
    if not isinstance(extra, str):
        raise TypeError(f"extra: expected a str such as 'course', got {type(extra).__name__} {extra!r}")
    source = None
    try:
        recorded = json.loads(metadata.distribution("ttr-edu").read_text("direct_url.json") or "null")
    except (metadata.PackageNotFoundError, json.JSONDecodeError, OSError):
        recorded = None
    if isinstance(recorded, dict) and isinstance(recorded.get("url"), str):
        url = urlparse(recorded["url"])
        if url.scheme == "file" and url.path:
            source = unquote(url.path)
    if source is None:
        return f"pip install {shlex.quote(f'ttr-edu[{extra}]')}"
    editable = isinstance(recorded.get("dir_info"), dict) and recorded["dir_info"].get("editable") is True
    return f"pip install {'-e ' if editable else ''}{shlex.quote(f'{source}[{extra}]')}"
