"""Tool parameter schemas: whether one is fit for a tool (:func:`check_schema`).

A tool's ``parameters`` must be valid JSON Schema Draft 2020-12 (judged by
``jsonschema_rs``, worded by ``jsonschema``) and also: at most
:data:`SCHEMA_MAX_CHARS` characters of canonical JSON and
:data:`SCHEMA_MAX_DEPTH` levels deep; every regular expression one Python
can compile and will not backtrack on for exponential time
(:mod:`ongridd.tools.regex_risk`); every ``$ref`` resolvable inside the
schema (nothing is fetched) and no ``$ref`` cycle through keywords that
apply to the same value.  Verdicts are cached per canonical text.
:func:`schema_nodes` and :func:`regex_patterns` walk a schema for the
argument validator (:mod:`ongridd.tools.args`).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from typing import Any

import jsonschema
import jsonschema_rs
from jsonschema import Draft202012Validator

from ongridd.tools.regex_risk import regex_problem
from ongridd.unicodetext import ascii_digits

#: the largest tool schema accepted (characters of its canonical JSON) and its deepest nesting
SCHEMA_MAX_CHARS = 256 * 1024
SCHEMA_MAX_DEPTH = 64

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
#: keywords whose values are data, never schemas (nothing in them is a keyword)
_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})
#: keywords whose values map names (not keywords) to subschemas
_NAMED_SUBSCHEMAS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
#: keywords applying subschemas to the instance itself (a ``$ref`` cycle through only these never ends)
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_MANY = ("allOf", "anyOf", "oneOf")


def schema_nodes(schema: Any) -> Iterator[tuple[dict[str, Any], bool]]:
    """Every object in ``schema`` that can be a (sub)schema, with whether it is the root;
    data keywords (``enum``, ``const``, ...) are not entered, names under ``properties`` and
    the like are not taken for keywords.  Iterative (any depth)."""
    stack: list[tuple[Any, bool]] = [(schema, True)]
    while stack:
        node, root = stack.pop()
        if isinstance(node, list):
            stack.extend((item, False) for item in node)
            continue
        if not isinstance(node, dict):
            continue
        yield node, root
        for key, value in node.items():
            if key in _DATA_KEYWORDS:
                continue
            if key in _NAMED_SUBSCHEMAS and isinstance(value, dict):
                stack.extend((sub, False) for sub in value.values())
            elif isinstance(value, (dict, list)):
                stack.append((value, False))


def regex_patterns(schema: Any) -> list[str]:
    """The regular expressions of a schema: ``pattern`` values and ``patternProperties`` names."""
    found: list[str] = []
    for node, _root in schema_nodes(schema):
        if isinstance(node.get("pattern"), str):
            found.append(node["pattern"])
        named = node.get("patternProperties")
        if isinstance(named, dict):
            found.extend(k for k in named if isinstance(k, str))
    return found


def schema_key(schema: Mapping[str, Any]) -> str:
    """Canonical JSON text of a schema (the validator cache key)."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


# ---- tool schemas -------------------------------------------------------------------------


def _depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` nests objects and arrays deeper than ``limit`` (iterative)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Iterable[Any] = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _schema_problem(schema: dict[str, Any], schema_json: str) -> str | None:
    """What makes a schema that is valid Draft 2020-12 unfit for a tool: a regular expression
    Python's ``re`` cannot compile or might take exponential time on, a ``$ref`` that does not
    resolve locally (remote schemas are never fetched), a ``$ref`` cycle that applies to the same
    value forever.  None when there is nothing."""
    for pattern in regex_patterns(schema):
        problem = regex_problem(pattern)
        if problem:
            return problem
    try:
        jsonschema_rs.Draft202012Validator(schema, offline=True)
    except jsonschema_rs.ValidationError as exc:
        if type(exc.kind).__name__ != "Format":  # a pattern its engine lacks: jsonschema decides alone
            return str(exc.message)[:300]
    except Exception as exc:  # noqa: BLE001 - e.g. too deeply nested for it
        return f"cannot be compiled: {exc}"[:300]
    cycle = _ref_cycle(schema)
    if cycle:
        return f"$ref cycle that applies to the same value forever: {cycle}"
    return None


@lru_cache(maxsize=512)
def _schema_ok(schema_json: str) -> bool:
    """Whether a schema (canonical JSON text) is valid Draft 2020-12 and fit for a tool, decided
    once per text; raises ``jsonschema.SchemaError`` saying why not."""
    if len(schema_json) > SCHEMA_MAX_CHARS:
        raise jsonschema.SchemaError(f"the schema is too large ({len(schema_json):,} characters of JSON, "
                                     f"at most {SCHEMA_MAX_CHARS:,})")
    try:
        schema = json.loads(schema_json)
    except RecursionError:
        schema = None
    if schema is None or _depth_over(schema, SCHEMA_MAX_DEPTH):
        raise jsonschema.SchemaError(f"the schema nests deeper than {SCHEMA_MAX_DEPTH} levels")
    try:
        verdict: bool | None = bool(jsonschema_rs.meta.is_valid(schema))
    except Exception:  # noqa: BLE001 - e.g. an unknown $schema: jsonschema decides alone
        verdict = None
    if not verdict:
        Draft202012Validator.check_schema(schema)  # raises SchemaError with the message
        if verdict is False:
            raise jsonschema.SchemaError(first_fast_error(lambda: jsonschema_rs.meta.validate(schema)))
    problem = _schema_problem(schema, schema_json)
    if problem:
        raise jsonschema.SchemaError(problem)
    return True


def first_fast_error(run: Any) -> str:
    """The message of the error ``run()`` raises (a ``jsonschema_rs.ValidationError``), bounded."""
    try:
        run()
    except jsonschema_rs.ValidationError as exc:
        return str(getattr(exc, "message", exc))[:200]
    except Exception:  # noqa: BLE001 - e.g. a value too deeply nested for it
        return "not valid"
    return "not valid"


def check_schema(schema: Mapping[str, Any]) -> None:
    """Raise ``jsonschema.SchemaError`` if ``schema`` is not a valid Draft 2020-12 schema fit
    for a tool: also for one larger than :data:`SCHEMA_MAX_CHARS` or nested deeper than
    :data:`SCHEMA_MAX_DEPTH`, one that contains itself or is not JSON, a regular expression
    Python cannot compile or may take exponential time on, a ``$ref`` that does not resolve
    within the schema (nothing is fetched) and a ``$ref`` cycle through keywords that apply to
    the same value (``allOf``, ``not``, ``if``, ...).

    The verdict is cached per canonical schema text (a registry rebuild
    re-checks no schema it has seen)."""
    try:
        key = schema_key(schema)
    except RecursionError:
        raise jsonschema.SchemaError(f"the schema nests too deeply (at most {SCHEMA_MAX_DEPTH} levels)") from None
    except (ValueError, TypeError) as exc:  # e.g. a schema containing itself
        raise jsonschema.SchemaError(f"the schema cannot be written as JSON: {exc}") from None
    _schema_ok(key)


# ---- $ref cycles -----------------------------------------------------------------------------


def _pointer(root: Any, fragment: str) -> Any:
    """The value at JSON pointer ``fragment`` (``/a/b``) in ``root``, or None."""
    node = root
    for raw in fragment.split("/")[1:]:
        part = urllib.parse.unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and ascii_digits(part) and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _ref_cycle(schema: Any) -> str | None:
    """A ``$ref`` chain from a subschema back to itself through keywords that apply to the same
    value (``$ref``, ``allOf``/``anyOf``/``oneOf``, ``not``, ``if``/``then``/``else``,
    ``dependentSchemas``), as ``"#/a → #/b → #/a"``; None when there is none.  Only references
    within the document (``#``, ``#/pointer``, ``#anchor``) are followed; a schema with an
    embedded ``$id`` is not looked at (its references resolve against other bases)."""
    nodes = list(schema_nodes(schema))
    if any("$id" in node for node, root in nodes if not root):
        return None
    anchors = {node[k]: node for node, _ in nodes for k in ("$anchor", "$dynamicAnchor")
               if isinstance(node.get(k), str)}
    names: dict[int, str] = {}

    def target(ref: Any) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#"):
            return None
        fragment = ref[1:]
        if fragment == "" or fragment.startswith("/"):
            return _pointer(schema, fragment)
        return anchors.get(fragment)

    def edges(node: dict[str, Any]) -> list[Any]:
        out: list[Any] = []
        for key in ("$ref", "$dynamicRef"):
            found = target(node.get(key))
            if isinstance(found, dict):
                names.setdefault(id(found), str(node[key]))
                out.append(found)
        out.extend(node[k] for k in _IN_PLACE_ONE if isinstance(node.get(k), dict))
        for k in _IN_PLACE_MANY:
            if isinstance(node.get(k), list):
                out.extend(s for s in node[k] if isinstance(s, dict))
        if isinstance(node.get("dependentSchemas"), dict):
            out.extend(s for s in node["dependentSchemas"].values() if isinstance(s, dict))
        return out

    state: dict[int, int] = {}  # 1: on the current path, 2: done
    for start, _root in nodes:
        if state.get(id(start)):
            continue
        path: list[dict[str, Any]] = [start]
        stack: list[Iterator[Any]] = [iter(edges(start))]
        state[id(start)] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                state[id(path.pop())] = 2
                continue
            seen = state.get(id(nxt))
            if seen == 1:
                at = next(i for i, n in enumerate(path) if n is nxt)
                chain = [names.get(id(n), "(subschema)") for n in path[at:]] + [names.get(id(nxt), "(subschema)")]
                return " → ".join(chain)
            if seen is None:
                state[id(nxt)] = 1
                path.append(nxt)
                stack.append(iter(edges(nxt)))
    return None


