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
expression its engine does not support, an integer beyond 64 bits, a lone
surrogate) is decided by ``jsonschema`` alone.

Where the two read a schema differently, the stricter verdict wins: for a
schema with a regular expression (ECMA 262 in ``jsonschema_rs``, Python's
``re`` in ``jsonschema``: ``$`` before a final newline, Unicode ``\\d``,
``\\w``, ``\\s``, ``.`` and ``\\r``), ``multipleOf`` or a ``$schema`` of
another draft inside it, arguments pass only when both accept; a rejection
by either is a rejection.  Python's ``re`` only ever sees strings of at most
:data:`PY_REGEX_MAX_CHARS` characters (longer ones are matched by the linear
engine alone), and tool schemas whose patterns Python cannot compile or may
backtrack on for exponential time are refused at registration
(:func:`check_schema`), as are unresolvable or endless ``$ref`` chains;
remote references are never fetched.  Work on hostile arguments is bounded:
``uniqueItems`` is linear, at most :data:`ERRORS_READ_MAX` errors are read,
large arguments are worded from ``jsonschema_rs``'s first error, and
arguments that cannot be checked (nested too deeply for ``jsonschema``) are
refused, never passed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any

import jsonschema
import jsonschema.validators
import jsonschema_rs
import referencing
from jsonschema import Draft202012Validator

from ongridd import jsontext
from ongridd.errors import ToolArgumentsError
from ongridd.tools.schema_check import DRAFT_2020_12, first_fast_error, schema_key, schema_nodes
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


def parse_arguments(tool_name: str, raw: str | None) -> dict[str, Any]:
    """Parse a tool call's raw argument text into a dict.

    ``""``, whitespace or ``None`` (parameterless tools) give
    ``{}``.  Raises ToolArgumentsError when the text is not JSON (including
    ``NaN``/``Infinity`` and ``1e999``, which JSON does not have) or is JSON but not an
    object.  The message names ``tool_name`` and quotes at most
    :data:`PREVIEW_CHARS` characters of ``raw``.
    """
    if raw is None or not raw.strip():
        return {}
    try:
        value = jsontext.loads(raw)
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


# ---- the two validators ------------------------------------------------------------------

#: Python's ``re`` (whose backtracking can take exponential time) is run on strings of at most
#: this many characters; a longer string is matched by the compiled validator's linear engine alone
PY_REGEX_MAX_CHARS = 256
#: a rejection is worded by ``jsonschema`` for arguments of at most this many values (and string
#: characters); larger ones are worded from ``jsonschema_rs``'s own errors
WORDING_MAX_NODES = 5_000
WORDING_MAX_CHARS = 1_000_000
#: arguments that ``jsonschema`` must judge (see the module doc) of more values than this are refused
PY_CHECK_MAX_NODES = 100_000
#: at most this many errors are read from a validator for one rejection
ERRORS_READ_MAX = 200
def _needs_both(schema: Any) -> bool:
    """Whether ``schema`` uses a keyword the two libraries read differently, so that arguments
    ``jsonschema_rs`` accepts must be accepted by ``jsonschema`` too: a regular expression
    (ECMA 262 against Python's ``re``: ``$`` before a final newline, Unicode ``\\d``/``\\w``/``\\s``,
    ``.`` and ``\\r``), ``multipleOf`` (exact arithmetic against floats) or a ``$schema`` other than
    Draft 2020-12 at the root (``jsonschema_rs`` switches drafts inside a schema)."""
    for node, root in schema_nodes(schema):
        if isinstance(node.get("pattern"), str) or isinstance(node.get("patternProperties"), dict):
            return True
        if "multipleOf" in node:
            return True
        if "$schema" in node and not (root and node["$schema"] == DRAFT_2020_12):
            return True
    return False


def _unique(instance: Sequence[Any]) -> bool:
    """jsonschema's ``uniqueItems`` verdict (``1 == 1.0``, ``True != 1`` at any depth) in linear time."""
    seen: set[Any] = set()
    for item in instance:
        key = _uniq_key(item)
        if key in seen:
            return False
        seen.add(key)
    return True


def _uniq_key(value: Any) -> Any:
    if value is True or value is False:
        return ("b", value is True)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, (int, float)):
        return ("n", value)  # 1, 1.0 (and -0.0, 0) are one key, as in jsonschema
    if isinstance(value, Mapping):
        return ("o", frozenset((k, _uniq_key(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return ("a", tuple(_uniq_key(v) for v in value))
    if value is None:
        return ("z",)
    return ("?", id(value))


def _shown(instance: str) -> str:
    return repr(instance) if len(instance) <= PREVIEW_CHARS else preview(instance)


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[jsonschema.ValidationError]:
    if unique and validator.is_type(instance, "array") and not _unique(instance):
        shown = repr(instance) if len(instance) <= 20 else f"an array of {len(instance):,} items"
        yield jsonschema.ValidationError(f"{shown} has non-unique elements")


@lru_cache(maxsize=1024)
def _fast_pattern(pattern: str) -> jsonschema_rs.Draft202012Validator | None:
    try:
        return jsonschema_rs.Draft202012Validator({"pattern": pattern}, offline=True)
    except Exception:  # noqa: BLE001 - a pattern only Python's re reads
        return None


def pattern_matches(pattern: str, text: str) -> bool:
    """Whether ``text`` matches ``pattern`` for both engines: the compiled validator's (ECMA 262,
    linear time) and, on strings of at most :data:`PY_REGEX_MAX_CHARS`, Python's ``re.search``.
    A longer string ``jsonschema_rs`` cannot read (a lone surrogate) or match does not match."""
    fast = _fast_pattern(pattern)
    verdict: bool | None = None
    if fast is not None:
        try:
            verdict = bool(fast.is_valid(text))
        except Exception:  # noqa: BLE001 - text it cannot convert (a lone surrogate)
            verdict = None
        if verdict is False:
            return False
    if len(text) <= PY_REGEX_MAX_CHARS:
        return re.search(pattern, text) is not None
    return verdict is True


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[jsonschema.ValidationError]:
    if validator.is_type(instance, "string") and not pattern_matches(pattern, instance):
        if len(instance) > PY_REGEX_MAX_CHARS and _fast_pattern(pattern) is None:
            yield jsonschema.ValidationError(f"a string of {len(instance):,} characters is too long to match "
                                             f"against {pattern!r}")
        else:
            yield jsonschema.ValidationError(f"{_shown(instance)} does not match {pattern!r}")


#: jsonschema's Draft 2020-12 validator with a linear ``uniqueItems`` and bounded ``pattern``
_PyValidator = jsonschema.validators.extend(Draft202012Validator, {"uniqueItems": _unique_items,
                                                                   "pattern": _pattern})


#: the references jsonschema may resolve beyond the schema itself: none (its default would fetch
#: a remote ``$ref`` over the network)
_NO_REMOTE: referencing.Registry[Any] = referencing.Registry()


# schema object → validator, so a tool's schema is not re-serialised on every
# call.  The schema is kept referenced, so its id cannot be reused while cached.
# (Tool schemas are not mutated after registration.)
_Validators = tuple[Any, "jsonschema_rs.Draft202012Validator | None", bool, bool]
_BY_SCHEMA: dict[int, tuple[Mapping[str, Any], _Validators]] = {}


def _validators(schema: Mapping[str, Any]) -> _Validators:
    """(the ``jsonschema`` validator, the ``jsonschema_rs`` one or None, whether both must accept,
    whether property names meet ``patternProperties``) of a schema, cached."""
    hit = _BY_SCHEMA.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    found = _compiled(schema_key(schema))
    if len(_BY_SCHEMA) >= 1024:
        _BY_SCHEMA.clear()
    _BY_SCHEMA[id(schema)] = (schema, found)
    return found


@lru_cache(maxsize=512)
def _compiled(schema_json: str) -> _Validators:
    """:func:`_validators` of a schema's canonical JSON text.  The last item: whether jsonschema
    matches property names with ``re`` itself (``patternProperties``, also read by
    ``additionalProperties`` and ``unevaluatedProperties``), past :func:`pattern_matches`."""
    schema = json.loads(schema_json)
    names_by_regex = any(isinstance(node.get("patternProperties"), dict) for node, _ in schema_nodes(schema))
    return (_PyValidator(schema, registry=_NO_REMOTE), _fast_validator_for(schema_json), _needs_both(schema),
            names_by_regex)


def _fast_validator_for(schema_json: str) -> jsonschema_rs.Draft202012Validator | None:
    """The compiled validator of a schema, or None when ``jsonschema_rs`` cannot compile it
    (never fetching a remote ``$ref``)."""
    try:
        return jsonschema_rs.Draft202012Validator(json.loads(schema_json), offline=True)
    except Exception:  # noqa: BLE001 - e.g. a pattern its regex engine lacks: jsonschema decides alone
        return None


def _fast_is_valid(fast: jsonschema_rs.Draft202012Validator | None, value: Any) -> bool | None:
    """``fast``'s verdict on ``value``; None when there is no fast validator or it cannot take the value."""
    if fast is None:
        return None
    try:
        return bool(fast.is_valid(value))
    except Exception:  # noqa: BLE001 - a value it cannot convert (an integer beyond 64 bits, a lone surrogate)
        return None


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


def _budget_over(value: Any, max_nodes: int, max_chars: int) -> bool:
    """Whether ``value`` holds more than ``max_nodes`` values or ``max_chars`` characters of
    strings (keys included); stops as soon as it knows (iterative)."""
    nodes = chars = 0
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        nodes += 1
        if isinstance(node, str):
            chars += len(node)
        elif isinstance(node, dict):
            chars += sum(len(k) for k in node if isinstance(k, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        if nodes > max_nodes or chars > max_chars:
            return True
    return False


def _long_key(value: Any) -> bool:
    """Whether an object in ``value`` has a name longer than :data:`PY_REGEX_MAX_CHARS`."""
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if any(isinstance(k, str) and len(k) > PY_REGEX_MAX_CHARS for k in node):
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def _py_problems(validator: Any, value: Any) -> tuple[dict[str, str], bool]:
    """``jsonschema``'s problems with ``value`` (message → sort key) and whether more errors were
    left unread (at most :data:`ERRORS_READ_MAX` are read)."""
    problems: dict[str, str] = {}
    for n, err in enumerate(validator.iter_errors(value)):
        if n >= ERRORS_READ_MAX:
            return problems, True
        key, msg = _describe(err)
        problems.setdefault(msg, key)
    return problems, False


def _fast_problems(fast: jsonschema_rs.Draft202012Validator, value: Any, *,
                   every: bool) -> tuple[dict[str, str], bool]:
    """:func:`_py_problems` from ``jsonschema_rs``'s errors: ``every`` error (its ``iter_errors``
    builds them all at once: for small arguments), else the first one only (for arguments too
    large to word with ``jsonschema``, the second bool then says there may be more).  Empty when
    it cannot read them."""
    problems: dict[str, str] = {}
    try:
        if every:
            errors = list(fast.iter_errors(value))
        else:
            try:
                fast.validate(value)
                errors = []
            except jsonschema_rs.ValidationError as exc:
                errors = [exc]
    except Exception:  # noqa: BLE001 - e.g. a value nested too deeply for it
        return problems, False
    for err in errors[:ERRORS_READ_MAX]:
        where = _field(err.instance_path)
        message = str(err.message)
        if len(message) > 200:  # the value comes first, what is wrong with it last: keep both ends
            message = message[:60] + "…" + message[-140:]
        problems.setdefault(f"field '{where}': {message}" if where else message, "3" + where)
    return problems, len(errors) > ERRORS_READ_MAX or (not every and bool(errors))


def validate_arguments(tool_name: str, schema: Mapping[str, Any], args: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``args`` against ``schema`` (JSON Schema Draft 2020-12).

    Optional parameters given as ``null`` are dropped first (they count as
    absent).  Returns the cleaned arguments.  Raises ToolArgumentsError
    listing up to :data:`MAX_PROBLEMS` problems, e.g.
    ``invalid arguments for AgentTool: missing required field(s): description, prompt``.

    The verdict (see the module doc): ``jsonschema_rs`` decides; where the
    schema uses a keyword the two libraries read differently (a regular
    expression, ``multipleOf``, another draft's ``$schema``), or
    ``jsonschema_rs`` cannot take the schema or the value, ``jsonschema``
    must accept too.  Arguments that cannot be checked (nested too deeply
    for ``jsonschema``, a schema it fails on, more than
    :data:`PY_CHECK_MAX_NODES` values where it must judge) are refused,
    never passed.  Never raises anything but ToolArgumentsError.
    """
    try:
        cleaned = drop_optional_nulls(args, schema)
    except RecursionError:
        raise ToolArgumentsError(f"invalid arguments for {tool_name}: nested too deeply to check") from None
    validator, fast, both, names_by_regex = _validators(schema)
    verdict = _fast_is_valid(fast, cleaned)
    if verdict and not both:
        return cleaned
    must_judge = verdict is None or both  # jsonschema's verdict counts, not only its words
    problems: dict[str, str] = {}
    more = False
    if verdict is False and _budget_over(cleaned, WORDING_MAX_NODES, WORDING_MAX_CHARS):
        assert fast is not None
        problems, more = _fast_problems(fast, cleaned, every=False)
    elif must_judge and _budget_over(cleaned, PY_CHECK_MAX_NODES, 1 << 62):
        problems["arguments: too large to check against this tool's schema "
                 f"(more than {PY_CHECK_MAX_NODES:,} values)"] = "0"
    elif must_judge and names_by_regex and _long_key(cleaned):
        problems[f"arguments: a property name longer than {PY_REGEX_MAX_CHARS} characters cannot be "
                 "checked against this tool's schema"] = "0"
    else:
        try:
            problems, more = _py_problems(validator, cleaned)
        except RecursionError:
            problems = {"arguments: nested too deeply to check": "0"}
        except Exception as exc:  # noqa: BLE001 - a schema jsonschema fails on: refused, not passed
            problems = {f"arguments could not be checked against the schema ({type(exc).__name__}: "
                        f"{str(exc)[:200]})": "0"}
    if not problems and verdict is False and fast is not None:  # jsonschema_rs decides; say what it saw
        problems, more = _fast_problems(fast, cleaned, every=not _budget_over(cleaned, WORDING_MAX_NODES,
                                                                               WORDING_MAX_CHARS))
        if not problems:
            problems[first_fast_error(lambda: fast.validate(cleaned))] = "9"
    if problems:
        ordered = sorted(problems, key=lambda m: problems[m])
        left = len(ordered) - MAX_PROBLEMS
        text = "; ".join(ordered[:MAX_PROBLEMS])
        if left > 0:
            text += f"; and {left} more" + (" (at least)" if more else "")
        elif more:
            text += "; and more"
        raise ToolArgumentsError(f"invalid arguments for {tool_name}: {text}")
    return cleaned


#: what ``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)``
#: makes on every call, made once
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def canonical_json(value: Any) -> str:
    """Canonical JSON (sorted keys, no spaces, UTF-8 kept) — the read-cache key."""
    return _CANONICAL.encode(value)
