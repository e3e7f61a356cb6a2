"""Tool-call arguments: parse the model's raw text, then validate it against
the tool's JSON schema (docs/architecture.md §8).

Both steps raise :class:`ongridd.errors.ToolArgumentsError` with a message
the model can act on, naming the tool and the problem::

    invalid JSON arguments for AgentTool: Unterminated string starting at: line 1 column 57 (char 56); arguments (88 chars): '{"subagent_type": …'
    invalid arguments for AgentTool: arguments must be a JSON object, got array
    invalid arguments for AgentTool: missing required field(s): description, prompt
    invalid arguments for get_incident_detail: field 'limit': expected integer, got string

Raw arguments only ever appear as a bounded preview (:data:`PREVIEW_CHARS`).

Two JSON Schema implementations, one decision: ``jsonschema_rs`` (compiled,
Draft 2020-12, formats not asserted, as in ``jsonschema``'s default) decides
whether arguments and tool schemas are valid; ``jsonschema`` turns a
rejection into the messages above (its errors carry the keyword, the value
and the path).  A schema or value ``jsonschema_rs`` cannot take (a regular
expression its engine does not support, an integer beyond 64 bits) is
decided by ``jsonschema`` alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import jsonschema
import jsonschema_rs
from jsonschema import Draft202012Validator

from ongridd.errors import ToolArgumentsError
from ongridd.typenames import type_name

#: at most this many characters of raw arguments are quoted in an error
PREVIEW_CHARS = 120
#: at most this many distinct schema problems are listed in one message
MAX_PROBLEMS = 5


#: The JSON name of a Python value's type (``object``, ``array``, ``string``, ...):
#: the project's one vocabulary of type names (:mod:`ongridd.typenames`).
json_type_name = type_name


def preview(raw: str, limit: int = PREVIEW_CHARS) -> str:
    """A bounded, quoted preview of raw text: ``'{"a": …' (1,234 chars)``."""
    if len(raw) <= limit:
        return repr(raw)
    return f"{raw[:limit]!r}… ({len(raw):,} chars)"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_arguments(tool_name: str, raw: str | None) -> dict[str, Any]:
    """Parse a tool call's raw argument text into a dict.

    ``""``, whitespace or ``None`` (parameterless tools) give
    ``{}``.  Raises ToolArgumentsError when the text is not JSON (including
    ``NaN``/``Infinity``, which JSON does not have) or is JSON but not an
    object.  The message names ``tool_name`` and quotes at most
    :data:`PREVIEW_CHARS` characters of ``raw``.
    """
    if raw is None or not raw.strip():
        return {}
    try:
        value = json.loads(raw, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise ToolArgumentsError(
            f"invalid JSON arguments for {tool_name}: {exc.msg}: line {exc.lineno} column {exc.colno} "
            f"(char {exc.pos}); arguments: {preview(raw)}"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise ToolArgumentsError(f"invalid JSON arguments for {tool_name}: {exc}; arguments: {preview(raw)}") from None
    if not isinstance(value, dict):
        raise ToolArgumentsError(
            f"invalid arguments for {tool_name}: arguments must be a JSON object, got {json_type_name(value)}"
        )
    return value


@lru_cache(maxsize=512)
def _validator_for(schema_json: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(schema_json))


# schema object → validator, so a tool's schema is not re-serialised on every
# call.  The schema is kept referenced, so its id cannot be reused while cached.
# (Tool schemas are not mutated after registration.)
_Validators = tuple[Draft202012Validator, "jsonschema_rs.Draft202012Validator | None"]
_BY_SCHEMA: dict[int, tuple[Mapping[str, Any], _Validators]] = {}


def _validators(schema: Mapping[str, Any]) -> _Validators:
    """(the ``jsonschema`` validator, the ``jsonschema_rs`` one or None) of a schema, cached."""
    hit = _BY_SCHEMA.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    key = schema_key(schema)
    pair = (_validator_for(key), _fast_validator_for(key))
    if len(_BY_SCHEMA) >= 1024:
        _BY_SCHEMA.clear()
    _BY_SCHEMA[id(schema)] = (schema, pair)
    return pair


def schema_key(schema: Mapping[str, Any]) -> str:
    """Canonical JSON text of a schema (the validator cache key)."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


@lru_cache(maxsize=512)
def _fast_validator_for(schema_json: str) -> jsonschema_rs.Draft202012Validator | None:
    """The compiled validator of a schema, or None when ``jsonschema_rs`` cannot compile it."""
    try:
        return jsonschema_rs.Draft202012Validator(json.loads(schema_json))
    except Exception:  # noqa: BLE001 - e.g. a pattern its regex engine lacks: jsonschema decides alone
        return None


def _fast_is_valid(fast: jsonschema_rs.Draft202012Validator | None, value: Any) -> bool | None:
    """``fast``'s verdict on ``value``; None when there is no fast validator or it cannot take the value."""
    if fast is None:
        return None
    try:
        return bool(fast.is_valid(value))
    except Exception:  # noqa: BLE001 - a value it cannot convert (an integer beyond 64 bits)
        return None


@lru_cache(maxsize=512)
def _schema_ok(schema_json: str) -> bool:
    """Whether a schema (canonical JSON text) is valid Draft 2020-12, decided once per text."""
    schema = json.loads(schema_json)
    try:
        verdict: bool | None = bool(jsonschema_rs.meta.is_valid(schema))
    except Exception:  # noqa: BLE001 - e.g. an unknown $schema: jsonschema decides alone
        verdict = None
    if verdict:
        return True
    Draft202012Validator.check_schema(schema)  # raises SchemaError with the message
    if verdict is None:
        return True
    raise jsonschema.SchemaError(_first_fast_error(lambda: jsonschema_rs.meta.validate(schema)))


def _first_fast_error(run: Any) -> str:
    """The message of the error ``run()`` raises (a ``jsonschema_rs.ValidationError``), bounded."""
    try:
        run()
    except jsonschema_rs.ValidationError as exc:
        return str(getattr(exc, "message", exc))[:200]
    return "not valid"


def check_schema(schema: Mapping[str, Any]) -> None:
    """Raise ``jsonschema.SchemaError`` if ``schema`` is not a valid Draft 2020-12 schema.

    The verdict is cached per canonical schema text (a registry rebuild
    re-checks no schema it has seen)."""
    _schema_ok(schema_key(schema))


def drop_optional_nulls(args: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """Remove keys whose value is ``null`` and that the schema does not require.

    Applies to the top level and, recursively, to nested objects described by
    ``properties`` in the schema.  A ``null`` for a *required* key is kept so
    validation reports it as a wrong type.
    """
    required = set(schema.get("required") or ()) if isinstance(schema, Mapping) else set()
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    out: dict[str, Any] = {}
    for key, value in args.items():
        if value is None and key not in required:
            continue
        sub = props.get(key) if isinstance(props, Mapping) else None
        if isinstance(value, dict) and isinstance(sub, Mapping) and "properties" in sub:
            value = drop_optional_nulls(value, sub)
        out[key] = value
    return out


def _field(path: Any) -> str:
    parts: list[str] = []
    for p in path:
        parts.append(f"[{p}]" if isinstance(p, int) else (f".{p}" if parts else str(p)))
    return "".join(parts)


def _describe(error: jsonschema.ValidationError) -> tuple[str, str]:
    """(sort key, message) for one validation error."""
    where = _field(error.absolute_path)
    if error.validator == "required":
        missing = [f for f in error.validator_value if isinstance(error.instance, Mapping) and f not in error.instance]
        at = f" in '{where}'" if where else ""
        return ("0" + where, f"missing required field(s){at}: {', '.join(missing)}")
    if error.validator == "type":
        expected = error.validator_value
        expected = " or ".join(expected) if isinstance(expected, list) else str(expected)
        got = json_type_name(error.instance)
        if where:
            return ("1" + where, f"field '{where}': expected {expected}, got {got}")
        return ("1", f"arguments: expected {expected}, got {got}")
    if error.validator == "additionalProperties" and error.validator_value is False:
        return ("2" + where, f"{'field ' + repr(where) + ': ' if where else ''}{error.message}")
    message = error.message
    if len(message) > 200:
        message = message[:200] + "…"
    return ("3" + where, f"field '{where}': {message}" if where else message)


def validate_arguments(tool_name: str, schema: Mapping[str, Any], args: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``args`` against ``schema`` (JSON Schema Draft 2020-12).

    Optional parameters given as ``null`` are dropped first (they count as
    absent).  Returns the cleaned arguments.  Raises ToolArgumentsError
    listing up to :data:`MAX_PROBLEMS` problems, e.g.
    ``invalid arguments for AgentTool: missing required field(s): description, prompt``.
    """
    cleaned = drop_optional_nulls(args, schema)
    validator, fast = _validators(schema)
    verdict = _fast_is_valid(fast, cleaned)
    if verdict:
        return cleaned
    problems: dict[str, str] = {}
    for err in validator.iter_errors(cleaned):
        key, msg = _describe(err)
        problems.setdefault(msg, key)
    if not problems and verdict is False and fast is not None:  # jsonschema_rs decides; say what it saw
        problems[_first_fast_error(lambda: fast.validate(cleaned))] = "9"
    if problems:
        ordered = sorted(problems, key=lambda m: problems[m])
        more = len(ordered) - MAX_PROBLEMS
        text = "; ".join(ordered[:MAX_PROBLEMS]) + (f"; and {more} more" if more > 0 else "")
        raise ToolArgumentsError(f"invalid arguments for {tool_name}: {text}")
    return cleaned


def canonical_json(value: Any) -> str:
    """Canonical JSON (sorted keys, no spaces, UTF-8 kept) — the read-cache key."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
