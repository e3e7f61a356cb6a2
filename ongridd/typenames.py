"""The one vocabulary of value type names in user-facing messages.

Every message that names the type of a value the user (or the model) gave
-- configuration keys, persona and skill frontmatter, tool-call arguments,
console frames -- uses JSON Schema's names, the words tool schemas already
use: ``null``, ``boolean``, ``integer``, ``number``, ``string``, ``array``,
``object``.  YAML values JSON has no word for are ``timestamp`` and
``binary``; anything else is its Python class name.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

__all__ = ["type_name"]


def type_name(value: Any) -> str:
    """The JSON Schema name of a loaded value's type (``object``, ``array``, ``boolean``, ...).

    ``bool`` is ``boolean`` (never ``integer``); ``float`` is ``number``;
    any mapping is ``object``; a list or tuple is ``array``.  Never raises.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, (datetime.date, datetime.datetime)):
        return "timestamp"
    if isinstance(value, (bytes, bytearray)):
        return "binary"
    return type(value).__name__
