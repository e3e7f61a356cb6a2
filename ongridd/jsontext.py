"""JSON as RFC 8259 has it, for text that comes from outside and text that goes out.

Python's :mod:`json` reads ``NaN``, ``Infinity`` and ``-Infinity`` (and
``1e999`` as infinity) and writes them back, although JSON has no such
values: a browser's ``JSON.parse``, PostgreSQL's ``json`` type and most
other readers refuse the whole document.  :func:`loads` refuses them where
text comes in (a request body, a chat frame, a tool call's arguments), so
the sender is told; :func:`dumps` never writes them (a value that still
holds one — a tool's computed float, an old row — is written with ``null``
in its place), so an answer is always JSON its reader can parse.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

__all__ = ["NonFiniteNumber", "dumper", "dumps", "loads"]


class NonFiniteNumber(ValueError):
    """Text that is JSON but for a number JSON does not have (``NaN``, ``Infinity``, ``1e999``);
    the message names it."""


def _no_constant(name: str) -> Any:
    raise NonFiniteNumber(f"{name} is not a JSON value (JSON numbers are finite); send it as a string or leave it out")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NonFiniteNumber(f"the number {text[:40]}{'…' if len(text) > 40 else ''} is beyond a 64-bit float's "
                              "range (JSON numbers are finite); send it as a string")
    return value


def loads(text: str | bytes) -> Any:
    """``json.loads`` that refuses ``NaN``, ``Infinity``, ``-Infinity`` and numbers that
    overflow a float (``1e999``): :class:`NonFiniteNumber` naming the value.  Otherwise raises
    what ``json.loads`` raises: ``json.JSONDecodeError`` for text that is not JSON,
    ``UnicodeDecodeError`` for bytes that are no Unicode text, ``ValueError`` for an integer
    of more digits than Python converts, ``RecursionError`` for absurd nesting."""
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)


def loads_or_none(raw: str | bytes) -> Any:
    """A request body as JSON (:func:`loads`), or None when it is empty or not JSON (invalid
    UTF-8 or JSON, absurd nesting).  Raises :class:`NonFiniteNumber` as :func:`loads` does."""
    if not raw:
        return None
    try:
        return loads(raw)
    except NonFiniteNumber:
        raise
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float (in dicts, lists and tuples) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps(value, **kwargs)`` that writes only JSON: a non-finite float anywhere in
    ``value`` is written as ``null``.  Raises what ``json.dumps`` raises otherwise
    (``TypeError`` for a value it cannot write without ``default``, ``ValueError`` for a
    circular reference)."""
    try:
        return json.dumps(value, allow_nan=False, **kwargs)
    except ValueError:
        return json.dumps(_finite(value), allow_nan=False, **kwargs)


def dumper(**kwargs: Any) -> Callable[[Any], str]:
    """:func:`dumps` with ``kwargs`` (``json.JSONEncoder``'s) fixed: the same text, from one
    encoder made here instead of one made per call (``json.dumps`` makes a new encoder on
    every call that passes any of them)."""
    encoder = json.JSONEncoder(allow_nan=False, **kwargs)

    def dump(value: Any) -> str:
        try:
            return encoder.encode(value)
        except ValueError:
            return encoder.encode(_finite(value))

    return dump
