"""Checking a plugin's numeric settings (``plugins.settings.<name>``) into
an attrs class whose fields all have defaults.  Part of the public plugin
API (re-exported by :mod:`ongridd.plugins.api`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from attrs import AttrsInstance

import attrs

T = TypeVar("T", bound="AttrsInstance")


def numeric_settings(cls: type[T], raw: Mapping[str, Any] | None, *, where: str,
                     float_keys: tuple[str, ...] = ("timeout_s",)) -> T:
    """``cls(**raw)`` after checking every key is a field of ``cls`` and every
    value a positive number (whole for keys not in ``float_keys``).

    ``where``: the config path for messages (``config.plugins.settings.x``).
    Raises ValueError naming the bad key; the plugin is then reported with it.
    """
    known = {f.name for f in attrs.fields(cls)}
    values: dict[str, Any] = {}
    for key, value in (raw or {}).items():
        if key not in known:
            raise ValueError(f"unknown setting {key!r} @ {where} (known: {', '.join(sorted(known))})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"expected a positive number @ {where}.{key}, got {value!r}")
        if key not in float_keys and not float(value).is_integer():
            raise ValueError(f"expected a whole number @ {where}.{key}, got {value!r}")
        values[key] = float(value) if key in float_keys else int(value)
    return cls(**values)
