"""YAML 1.2 loading whose cost is bounded by construction, and bounded value previews.

Every YAML file the daemon reads (the configuration, persona and skill
frontmatter, the marketplace index, fake-model scripts, runbook front matter)
is loaded through
:func:`yaml_loader`: a pure-Python ruamel.yaml loader whose composer refuses,
with a :class:`YamlBoundsError` that carries the line,

- more than ``max_aliases`` alias nodes (``*name``);
- an alias used inside the node its anchor names (a recursive alias);
- more than ``max_nodes`` composed nodes, or nesting deeper than ``max_depth``
  (checked while composing, so a huge or deep input stops early; flow
  nesting — ``[[[[`` — is also stopped in the scanner, whose look-ahead for
  simple keys costs time in proportion to the flow depth for every token);
- a document whose tree, *with every alias expanded*, would have more than
  ``max_nodes`` nodes, more than ``max_chars`` characters of scalar text, or
  more than ``max_depth`` levels.

Why this holds by construction: an alias makes the composed node graph share
a node, so the graph stays as small as the text (the "billion laughs" of nine
levels of nine is about a hundred nodes), while the tree a consumer walks
(``repr``, ``json.dumps``, a copy) is exponentially larger.  Before anything is
constructed, :func:`check_expansion` walks the graph once, bottom-up, with one
memo entry per node, and computes each node's expanded node count, text size
and depth; the work is linear in the graph, and the first node whose expanded
size crosses a limit is refused with its line (a document without aliases
is as large as its text and its composed nodes, both bounded).  Merge keys (``<<: *a``) are
children like any other value, so the pairs the constructor copies when it
flattens a merge are counted too.  Afterwards the constructed data is a DAG
whose full expansion is within the limits, so *any* walk over it — a warning,
a JSON rendering, a deep copy — costs at most ``max_nodes`` steps and
``max_chars`` characters, and the constructor's own recursion is at most
``max_depth`` deep (never a ``RecursionError``).

Frontmatter goes through :func:`compose_bounded`: when libyaml is installed
its events are composed by :func:`_compose_events` into the same nodes with
the same limits (one tight loop instead of ruamel's per-event dispatch), and
anything it refuses is composed again on the pure path for the error.
:func:`load_plain` goes one step further for the documents most frontmatter
is (no anchors, aliases, tags, merge or duplicate keys; strings, nulls,
booleans and decimal numbers): it builds the data straight from the events,
with the same limits, and leaves every other document to the composer.

:func:`parse_yaml` loads text with those limits and turns every YAML error
into one message with the line; :func:`read_yaml_file` is the one reader of
a YAML file (regular files only, size-capped, never blocked by a FIFO).

:func:`describe` and :func:`quote` build the text of a message about a bad
value by visiting at most a fixed number of items and characters, never
``repr()``/``str()`` of the whole value.
"""

from __future__ import annotations

import datetime
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
from ruamel.yaml import YAML
from ruamel.yaml.composer import Composer
from ruamel.yaml.constructor import SafeConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
    StreamStartEvent,
)
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.resolver import BaseResolver, VersionedResolver
from ruamel.yaml.scanner import Scanner
from ruamel.yaml.tag import Tag

from ongridd.errors import ConfigError
from ongridd.secretset import redact, redact_head
from ongridd.typenames import type_name

__all__ = [
    "CONFIG_LIMITS",
    "FRONTMATTER_LIMITS",
    "MAX_YAML_FILE_BYTES",
    "BoundedComposer",
    "PlainDocument",
    "YamlBoundsError",
    "YamlLimits",
    "check_expansion",
    "compose_bounded",
    "describe",
    "load_plain",
    "parse_yaml",
    "quote",
    "read_yaml_file",
    "yaml_loader",
    "yaml_type",
]


@attrs.frozen(kw_only=True)
class YamlLimits:
    """What one YAML document may cost.

    ``max_aliases``: alias nodes (``*name``) in the text.  ``max_nodes``:
    nodes (scalars, sequences, mappings; keys included) both as composed and
    with every alias expanded.  ``max_chars``: characters of scalar text with
    every alias expanded.  ``max_depth``: nesting levels, composed and
    expanded.
    """

    max_aliases: int = 1_000
    max_nodes: int = 100_000
    max_chars: int = 8_000_000
    max_depth: int = 64


#: The configuration file, the marketplace index and fake-model scripts
#: (files of at most 1 MiB the operator writes).
CONFIG_LIMITS = YamlLimits()
#: Persona and skill frontmatter (a page of keys; the body is not YAML).  The
#: same alias and depth bounds as the configuration; 5,000 nodes (as many as
#: ``metadata`` may hold) compose in well under a second.
FRONTMATTER_LIMITS = YamlLimits(max_nodes=5_000, max_chars=1_000_000)


class YamlBoundsError(MarkedYAMLError):
    """A YAML document exceeds a :class:`YamlLimits` bound.

    ``problem`` is the message (``YAML aliases expand to more than 5,000
    nodes``), ``problem_mark`` the place (``.line`` is 0-based in the YAML
    text).  A ``MarkedYAMLError``, so code that reports ruamel's own errors
    with their line reports these the same way.
    """

    def __init__(self, problem: str, mark: Any):
        super().__init__(problem=problem, problem_mark=mark)


class BoundedComposer(Composer):
    """ruamel's composer with :class:`YamlLimits` enforced (see the module doc).

    The limits come from the loader's ``yaml_limits`` attribute (set by
    :func:`yaml_loader`), :data:`CONFIG_LIMITS` when it has none.  Raises
    :class:`YamlBoundsError`; reused anchor names are allowed silently (YAML
    permits them; the later one wins).
    """

    def __init__(self, loader: Any = None) -> None:
        super().__init__(loader=loader)
        self.warn_double_anchors = False
        self.limits: YamlLimits = getattr(loader, "yaml_limits", None) or CONFIG_LIMITS
        self._aliases = 0
        self._nodes = 0

    # ruamel's own properties go through the loader's lazy properties on every
    # event; once the parser and resolver exist, read them directly.
    @property
    def parser(self) -> Any:
        parser = getattr(self.loader, "_parser", None)
        return parser if parser is not None else self.loader.parser

    @property
    def resolver(self) -> Any:
        resolver = getattr(self.loader, "_resolver", None)
        return resolver if resolver is not None else self.loader.resolver

    def compose_document(self) -> Any:
        self._aliases = 0
        self._nodes = 0
        node = super().compose_document()
        if node is not None and self._aliases:
            check_expansion(node, self.limits)
        return node

    def compose_node(self, parent: Any, index: Any) -> Any:
        limits = self.limits
        event = self.parser.peek_event()
        if isinstance(event, AliasEvent):
            self._aliases += 1
            if self._aliases > limits.max_aliases:
                raise YamlBoundsError(f"more than {limits.max_aliases:,} YAML aliases", event.start_mark)
            target = self.anchors.get(event.anchor)
            # A collection's end mark is set when its end event is composed:
            # an alias to one still open is an alias inside its own anchor.
            if isinstance(target, (SequenceNode, MappingNode)) and target.end_mark is None:
                raise YamlBoundsError(
                    f"YAML alias *{str(event.anchor)[:40]} is used inside the node its anchor names "
                    "(a recursive alias)", event.start_mark)
            return super().compose_node(parent, index)
        self._nodes += 1
        if self._nodes > limits.max_nodes:
            raise YamlBoundsError(f"the YAML has more than {limits.max_nodes:,} nodes", event.start_mark)
        if self.depth >= limits.max_depth:
            raise YamlBoundsError(f"the YAML is nested deeper than {limits.max_depth} levels", event.start_mark)
        return super().compose_node(parent, index)


class _FlowDepthBound:
    """Scanner mixin: a flow collection (``[`` or ``{``) deeper than
    ``max_depth`` raises :class:`YamlBoundsError` when it opens."""

    def fetch_flow_collection_start(self, TokenClass: Any, to_push: str) -> None:
        limits = getattr(self.loader, "yaml_limits", None) or CONFIG_LIMITS  # type: ignore[attr-defined]
        if len(self.flow_context) >= limits.max_depth:  # type: ignore[attr-defined]
            raise YamlBoundsError(f"the YAML is nested deeper than {limits.max_depth} levels",
                                  self.reader.get_mark())  # type: ignore[attr-defined]
        super().fetch_flow_collection_start(TokenClass, to_push)  # type: ignore[misc]


_BOUNDED_SCANNERS: dict[type, type] = {}


def _bounded_scanner(base: type) -> type:
    if base not in _BOUNDED_SCANNERS:
        _BOUNDED_SCANNERS[base] = type(f"Bounded{base.__name__}", (_FlowDepthBound, base), {})
    return _BOUNDED_SCANNERS[base]


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return node.value
    if isinstance(node, MappingNode):
        return [child for pair in node.value for child in pair]
    return []


def check_expansion(root: Node, limits: YamlLimits) -> None:
    """Refuse a composed document whose alias-expanded tree is too large.

    ``root``: a composed node graph without cycles (the composer refuses
    recursive aliases).  Computes, for every node once (memoised by
    identity, iteratively — no recursion), the expanded node count, the
    expanded scalar characters and the expanded depth, and raises
    :class:`YamlBoundsError` at the first node (bottom-up, so the smallest
    offending value) that crosses ``limits``.  Linear in the size of the
    graph, whatever the expansion would be.
    """
    memo: dict[int, tuple[int, int, int]] = {}
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in memo:
            continue
        if isinstance(node, ScalarNode):
            memo[key] = (1, len(node.value) if isinstance(node.value, str) else 1, 1)
            continue
        children = _children(node)
        if not children_done:
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in memo)
            continue
        nodes = chars = 1
        depth = 0
        for child in children:
            c_nodes, c_chars, c_depth = memo[id(child)]
            nodes += c_nodes
            chars += c_chars
            depth = max(depth, c_depth)
        depth += 1
        if nodes > limits.max_nodes:
            raise YamlBoundsError(f"YAML aliases expand to more than {limits.max_nodes:,} nodes", node.start_mark)
        if chars > limits.max_chars:
            raise YamlBoundsError(f"YAML aliases expand to more than {limits.max_chars:,} characters of text",
                                  node.start_mark)
        if depth > limits.max_depth:
            raise YamlBoundsError(f"YAML aliases nest deeper than {limits.max_depth} levels", node.start_mark)
        memo[key] = (nodes, chars, depth)


def yaml_loader(typ: str = "safe", limits: YamlLimits = CONFIG_LIMITS) -> YAML:
    """A fresh pure-Python ruamel ``YAML`` (YAML 1.2) whose composer enforces ``limits``.

    ``typ``: ``safe`` (plain Python values; tags such as ``!!python/object``
    are refused) or ``rt`` (round-trip values that keep line marks).
    ``load``/``compose`` raise ruamel's errors for bad YAML and
    :class:`YamlBoundsError` past a limit.  One instance per document (a
    ruamel loader is not thread-safe).
    """
    if typ not in ("safe", "rt"):
        raise ValueError(f"unsupported YAML loader type {typ!r}")
    yaml = YAML(typ=typ, pure=True)
    yaml.Composer = BoundedComposer
    yaml.Scanner = _bounded_scanner(yaml.Scanner or Scanner)
    yaml.yaml_limits = limits  # type: ignore[attr-defined]  # read by BoundedComposer
    return yaml


try:  # libyaml's reader, scanner and parser (the ruamel.yaml.clib package), when installed
    from _ruamel_yaml import CParser as _CParser
except ImportError:  # pragma: no cover - the pure-Python path is used alone
    _CParser = None


class _Resolver12:
    """The YAML 1.2 implicit tags of ruamel's ``VersionedResolver``, looked up once.

    ``resolve_scalar`` gives the tag ``VersionedResolver.resolve`` gives a
    plain scalar of a 1.2 document without path resolvers (collections and
    quoted scalars get the default tags); ``processing_version`` is what
    ``SafeConstructor`` reads.  Immutable after construction, so one
    instance is shared by every document and thread.
    """

    processing_version = (1, 2)

    def __init__(self) -> None:
        table = VersionedResolver(version=(1, 2)).versioned_resolver
        tags: dict[str, Tag] = {}

        def entries(rules: list[tuple[str, Any]]) -> tuple[tuple[Tag, Any], ...]:
            return tuple((tags.setdefault(tag, Tag(suffix=tag)), regexp) for tag, regexp in rules)

        any_first = list(table.get(None, []))
        self._by_first: dict[str, tuple[tuple[Tag, Any], ...]] = {
            first: entries(list(rules) + any_first) for first, rules in table.items() if first is not None}
        self._any_first = entries(any_first)
        # the tags plain_value builds itself, as resolve_scalar returns them (None: no rule gives it)
        self._null, self._bool, self._int, self._float = (tags.get(name) for name in (
            "tag:yaml.org,2002:null", "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"))

    def resolve_scalar(self, value: str) -> Tag:
        """The tag of a plain scalar: the first implicit rule that matches (for
        its first character, as ruamel looks them up), else ``str``."""
        for tag, regexp in self._by_first.get(value[:1], self._any_first):
            if regexp.match(value):
                return tag
        return BaseResolver.DEFAULT_SCALAR_TAG

    def plain_value(self, value: str) -> Any:
        """What ``SafeConstructor`` builds of a plain scalar whose tag resolves to ``str``,
        ``null`` or ``bool``, or to ``int``/``float`` written as plain decimal digits (with a sign;
        a float with one ``.`` between digits); :data:`_NOT_PLAIN` for anything else (``0x1F``,
        ``1_000``, ``.inf``, ``1e3``, a timestamp, a merge key), which the caller leaves to
        the constructor."""
        tag = self.resolve_scalar(value)
        if tag is BaseResolver.DEFAULT_SCALAR_TAG:
            return value
        if tag is self._null:
            return None
        if tag is self._bool:
            return value.lower() == "true"
        if tag is self._int and _PLAIN_INT.fullmatch(value):
            return int(value)
        if tag is self._float and _PLAIN_FLOAT.fullmatch(value):
            return float(value)
        return _NOT_PLAIN


_PLAIN_INT = re.compile(r"[-+]?[0-9]+", re.ASCII)
_PLAIN_FLOAT = re.compile(r"[-+]?[0-9]+\.[0-9]+", re.ASCII)
#: :meth:`_Resolver12.plain_value`'s answer for a scalar it leaves to the constructor.
_NOT_PLAIN: Any = object()


class _FastLoader:
    """What ``SafeConstructor`` needs of a loader on the fast path (no ``typ``:
    it reads ``_resolver`` directly).  ``constructor`` builds data from a
    node composed by :func:`_compose_events`; one instance per document."""

    comment_handling = None

    def __init__(self, resolver: _Resolver12) -> None:
        self._resolver = resolver
        self._constructor = None
        constructor = SafeConstructor(loader=self)
        constructor.allow_duplicate_keys = False  # as YAML().constructor sets it
        self.constructor = constructor


_RESOLVER_12: _Resolver12 | None = None


def _resolver_12() -> _Resolver12:
    global _RESOLVER_12
    if _RESOLVER_12 is None:
        _RESOLVER_12 = _Resolver12()
    return _RESOLVER_12


class _FastPathRefused(Exception):
    """The fast path cannot (or must not) compose this text; the pure path will."""


def _compose_events(parser: Any, limits: YamlLimits, resolver: _Resolver12) -> Any:
    """Compose the single document of libyaml ``parser``'s events, as
    ``BoundedComposer.get_single_node`` would, with the same limits.

    Builds the same nodes (tags resolved for YAML 1.2, styles, marks,
    anchors shared by aliases) without per-event Python dispatch through
    the loader.  Raises :class:`_FastPathRefused` (or the parser's own
    error) for anything the pure path must answer: bad YAML, a limit, a
    ``%YAML``/``%TAG`` directive, more than one document.
    """
    get = parser.get_event
    event = get()
    if not isinstance(event, StreamStartEvent):
        raise _FastPathRefused("no stream start")
    event = get()
    if isinstance(event, StreamEndEvent):
        return None
    if not isinstance(event, DocumentStartEvent) or event.version is not None or event.tags:
        raise _FastPathRefused("directives")
    max_aliases, max_nodes, max_depth = limits.max_aliases, limits.max_nodes, limits.max_depth
    anchors: dict[Any, Node] = {}
    aliases = nodes = 0
    # Open collections, innermost last: (node, its value list).
    stack: list[tuple[Node, list]] = []
    root: Any = None
    while True:
        event = get()
        cls = type(event)
        if cls is ScalarEvent or cls is SequenceStartEvent or cls is MappingStartEvent:
            nodes += 1
            if nodes > max_nodes or len(stack) >= max_depth:
                raise _FastPathRefused("limit")
            tag = event.ctag
            if cls is ScalarEvent:
                if tag is None or tag == "!":
                    if event.implicit[0]:
                        tag = resolver.resolve_scalar(event.value)
                    else:
                        tag = BaseResolver.DEFAULT_SCALAR_TAG
                node: Node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style,
                                        anchor=event.anchor)
                opened = None
            else:
                if cls is SequenceStartEvent:
                    if tag is None or tag == "!":
                        tag = BaseResolver.DEFAULT_SEQUENCE_TAG
                    node = SequenceNode(tag, [], event.start_mark, None, flow_style=event.flow_style,
                                        anchor=event.anchor)
                else:
                    if tag is None or tag == "!":
                        tag = BaseResolver.DEFAULT_MAPPING_TAG
                    node = MappingNode(tag, [], event.start_mark, None, flow_style=event.flow_style,
                                       anchor=event.anchor)
                opened = node
            if event.anchor is not None:
                anchors[event.anchor] = node
        elif cls is AliasEvent:
            aliases += 1
            if aliases > max_aliases:
                raise _FastPathRefused("limit")
            target = anchors.get(event.anchor)
            if target is None or (isinstance(target, (SequenceNode, MappingNode)) and target.end_mark is None):
                raise _FastPathRefused("undefined or recursive alias")
            node = target
            opened = None
        elif cls is SequenceEndEvent or cls is MappingEndEvent:
            closed, items = stack.pop()
            if cls is MappingEndEvent:
                if len(items) % 2:
                    raise _FastPathRefused("odd mapping")
                closed.value = list(zip(items[0::2], items[1::2]))
            closed.end_mark = event.end_mark
            if not stack:
                root = closed
                break
            continue
        else:
            raise _FastPathRefused(f"unexpected {cls.__name__}")
        if stack:
            stack[-1][1].append(node)
        elif opened is None:
            root = node
            break
        if opened is not None:
            if cls is SequenceStartEvent:
                stack.append((opened, opened.value))
            else:
                stack.append((opened, []))
    if not isinstance(get(), DocumentEndEvent) or not isinstance(get(), StreamEndEvent):
        raise _FastPathRefused("more than one document")
    if aliases:
        check_expansion(root, limits)
    return root


@attrs.frozen
class PlainDocument:
    """One YAML document built by :func:`load_plain`: ``data`` (``None`` for an empty document),
    and for a mapping at the top the 0-based line of each plain-text key (``key_lines``, by the
    key's text as written) and of each item of a sequence under such a key (``item_lines``)."""

    data: Any
    key_lines: dict[str, int]
    item_lines: dict[str, tuple[int, ...]]


def load_plain(text: str, limits: YamlLimits) -> PlainDocument | None:
    """The data of ``text`` built straight from libyaml's events, for the documents most files
    are — mappings, sequences and scalars without anchors, aliases, tags, directives, merge keys
    or duplicate keys, whose scalars are strings, nulls, booleans and decimal numbers — exactly
    as composing and then ``SafeConstructor`` would build it; ``None`` for any other text
    (libyaml not installed, bad YAML, a limit, anything above), which the caller loads with
    :func:`compose_bounded` for the data or the error.  Bounded as :func:`compose_bounded`:
    events arrive lazily, and a node past ``max_nodes`` or ``max_depth`` ends it.  Never raises."""
    if _CParser is None or BaseResolver.yaml_path_resolvers:
        return None
    try:
        parser = _CParser(text)
    except Exception:  # noqa: BLE001 — left to compose_bounded, which gives the error
        return None
    try:
        return _load_plain_events(parser.get_event, limits, _resolver_12())
    except Exception:  # noqa: BLE001 — as above
        return None
    finally:
        parser.dispose()


def _load_plain_events(get: Any, limits: YamlLimits, resolver: _Resolver12) -> PlainDocument | None:
    """:func:`load_plain` over the events ``get()`` returns."""
    if type(get()) is not StreamStartEvent:
        return None
    event = get()
    if type(event) is StreamEndEvent:
        return PlainDocument(None, {}, {})
    if type(event) is not DocumentStartEvent or event.version is not None or event.tags:
        return None
    max_nodes, max_depth = limits.max_nodes, limits.max_depth
    nodes = 0
    # Open collections, innermost last: [container, the key awaiting its value (mappings only)]
    stack: list[list[Any]] = []
    key_lines: dict[str, int] = {}
    item_lines: dict[str, list[int]] = {}
    top_key: str | None = None  # the top mapping's latest key (whose sequence's item lines are kept)
    plain_value = resolver.plain_value
    while True:
        event = get()
        cls = type(event)
        if cls is ScalarEvent or cls is SequenceStartEvent or cls is MappingStartEvent:
            nodes += 1
            if nodes > max_nodes or len(stack) >= max_depth or event.anchor is not None \
                    or event.ctag is not None:
                return None
            if cls is ScalarEvent:
                value: Any = plain_value(event.value) if event.implicit[0] else event.value
                if value is _NOT_PLAIN:
                    return None
                opened: list[Any] | dict[Any, Any] | None = None
            else:
                value = opened = [] if cls is SequenceStartEvent else {}
        elif cls is SequenceEndEvent or cls is MappingEndEvent:
            closed = stack.pop()
            if cls is MappingEndEvent and closed[1] is not _NO_KEY:
                return None  # (libyaml never ends a mapping after a key)
            if not stack:
                root = closed[0]
                break
            continue
        else:  # an alias, or anything unexpected
            return None
        if not stack:
            if opened is None:
                root = value
                break
            stack.append([opened, _NO_KEY])
            continue
        top = stack[-1]
        container = top[0]
        if type(container) is list:
            container.append(value)
            if len(stack) == 2 and top_key is not None:
                item_lines[top_key].append(event.start_mark.line)
        elif top[1] is _NO_KEY:  # a key
            if opened is not None or value in container:
                return None  # a collection as a key, or a duplicate (the constructor's error)
            top[1] = value
            if len(stack) == 1 and cls is ScalarEvent:
                top_key = event.value
                key_lines[top_key] = event.start_mark.line
        else:
            container[top[1]] = value
            top[1] = _NO_KEY
            if len(stack) == 1 and cls is SequenceStartEvent:
                item_lines[top_key] = []  # type: ignore[index]
        if opened is not None:
            stack.append([opened, _NO_KEY])
    if type(get()) is not DocumentEndEvent or type(get()) is not StreamEndEvent:
        return None
    return PlainDocument(root, key_lines, {k: tuple(v) for k, v in item_lines.items()})


_NO_KEY: Any = object()


def compose_bounded(text: str, limits: YamlLimits) -> tuple[YAML | _FastLoader, Any]:
    """Compose one YAML document from ``text`` with ``limits`` enforced; returns ``(yaml, node)``.

    Fast path: when ruamel.yaml.clib is installed, libyaml (C) scans and
    parses, and its events are composed by :func:`_compose_events` into the
    nodes :class:`BoundedComposer` would build, with the same limits checked
    as each event arrives (events are produced lazily, so a deep or huge
    input stops after at most ``max_depth``/``max_nodes`` events), and
    ``SafeConstructor`` builds the data.  Any error on the fast path (bad
    YAML, a limit) — and a ``%YAML``/``%TAG`` directive — is answered by
    composing again on the pure-Python path, so the error raised, with its
    message and line, is exactly the pure path's.  The first item returned
    has a ``constructor`` whose ``construct_document(node)`` builds the data
    (``node`` is ``None`` for an empty document).  Raises ruamel's errors and
    :class:`YamlBoundsError` like ``yaml.compose``.  Thread-safe (nothing is
    shared between calls but immutable tag tables).
    """
    if _CParser is not None and not BaseResolver.yaml_path_resolvers:
        try:
            parser = _CParser(text)
            try:
                resolver = _resolver_12()
                return _FastLoader(resolver), _compose_events(parser, limits, resolver)
            finally:
                parser.dispose()
        except Exception:  # noqa: BLE001 — the pure path below gives the error with its usual message
            pass
    yaml = yaml_loader("safe", limits)
    return yaml, yaml.compose(text)


# ---- bounded previews -------------------------------------------------------------


def yaml_type(value: Any) -> str:
    """A user-facing name of a loaded YAML value's type, in the one vocabulary of
    :func:`ongridd.typenames.type_name` (``null``, ``boolean``, ``array``, ``object``...)."""
    return type_name(value)


def quote(text: str, limit: int = 60) -> str:
    """``repr`` of at most ``limit`` characters of ``text`` (``…`` marks a cut), every held
    secret hidden (:func:`~ongridd.secretset.redact_head`: the preview of a value is what
    warnings, logs and the API show of a file).

    Costs O(``limit`` + the longest secret held) whatever the length of ``text``.
    """
    if len(text) <= limit:
        return repr(redact(text))
    cut = repr(redact_head(text, limit))
    return cut[:-1] + "…" + cut[-1]


#: An integer with more bits than this is described by its size, not its digits
#: (Python refuses to print integers of more than 4,300 digits).
_MAX_INT_BITS = 256


class _Full(Exception):
    pass


class _Preview:
    """Text of at most ``limit`` characters; :meth:`add` raises _Full past it."""

    def __init__(self, limit: int):
        self.limit = limit
        self.parts: list[str] = []
        self.size = 0

    def add(self, text: str) -> None:
        room = self.limit - self.size
        if len(text) > room:
            self.parts.append(text[:max(room, 0)])
            self.size = self.limit
            raise _Full
        self.parts.append(text)
        self.size += len(text)

    def value(self, v: Any) -> None:
        if v is None:
            self.add("null")
        elif isinstance(v, bool):
            self.add("true" if v else "false")
        elif isinstance(v, int):
            self.add(repr(v) if v.bit_length() <= _MAX_INT_BITS else f"<integer of {v.bit_length():,} bits>")
        elif isinstance(v, float):
            self.add(repr(v))
        elif isinstance(v, str):
            self.add(quote(v, max(self.limit - self.size - 3, 0)))  # room for the quotes and the …
        elif isinstance(v, (bytes, bytearray)):
            self.add(repr(bytes(v[: self.limit])))
        elif isinstance(v, (datetime.date, datetime.datetime)):
            self.add(v.isoformat())
        elif isinstance(v, Mapping):
            self.add("{")
            for i, (k, x) in enumerate(v.items()):  # stops at the first item that does not fit
                if i:
                    self.add(", ")
                self.value(k)
                self.add(": ")
                self.value(x)
            self.add("}")
        elif isinstance(v, (list, tuple)):
            self.add("[")
            for i, x in enumerate(v):
                if i:
                    self.add(", ")
                self.value(x)
            self.add("]")
        else:
            self.add(f"<{type(v).__name__}>")


def describe(value: Any, limit: int = 60) -> str:
    """A message-sized description of a loaded YAML value, bounded by construction.

    ``null``, ``boolean true``, ``integer 42``, ``string 'abc…' (12,345
    characters)``, ``array of 9 items [[['lol', 'lol', …`` or ``object of 3
    keys {…``: the type, the size of a string or collection, and a preview of
    at most ``limit`` characters.  The preview visits at most ``limit``
    items (every item adds at least one character), so the cost is
    O(``limit``) even for an alias-shared structure whose full ``repr``
    would be gigabytes.  Never raises for any value.
    """
    if value is None:
        return "null"
    kind = yaml_type(value)
    size = ""
    try:
        if isinstance(value, str) and len(value) > limit:
            size = f" ({len(value):,} characters)"
        elif isinstance(value, Mapping):
            n = len(value)
            kind = f"object of {n:,} key{'s' if n != 1 else ''}"
        elif isinstance(value, (list, tuple)):
            n = len(value)
            kind = f"array of {n:,} item{'s' if n != 1 else ''}"
    except Exception:  # noqa: BLE001 — an odd mapping type whose len() fails
        pass
    preview = _Preview(limit)
    try:
        preview.value(value)
        cut = False
    except _Full:
        cut = True
    except Exception:  # noqa: BLE001 — a description must never fail
        cut = True
    text = "".join(preview.parts) + ("…" if cut else "")
    return f"{kind} {text}{size}"


# ---- reading a YAML file ----------------------------------------------------------

#: The largest YAML file read with :func:`read_yaml_file` (configuration,
#: fake-model scripts, the marketplace index): files the operator writes.
MAX_YAML_FILE_BYTES = 1024 * 1024


def parse_yaml(text: str, source: str, *, error: type[Exception] = ConfigError, typ: str = "safe") -> Any:
    """Load YAML 1.2 text (``typ``: ``safe``, or ``rt`` to keep line marks).

    Every file the daemon reads goes through here (or, for frontmatter,
    through the same bounded composer): more than ``CONFIG_LIMITS.max_aliases``
    aliases, a recursive alias, or a document deeper or larger than the
    limits — counted with aliases expanded — is refused before anything is
    constructed.

    Raises ``error("<source>:<line>: invalid YAML: <problem>")``.
    """
    try:
        return yaml_loader(typ, CONFIG_LIMITS).load(text)
    except RecursionError:
        raise error(f"{source}: invalid YAML: nested too deeply") from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise error(f"{source}{line}: invalid YAML: {str(exc.problem or exc)[:300]}") from None
    except (YAMLError, ValueError) as exc:  # ValueError: e.g. an integer with thousands of digits
        raise error(f"{source}: invalid YAML: {str(exc)[:200]}") from None


def read_yaml_file(path: str | os.PathLike[str], *, what: str = "config file", error: type[Exception] = ConfigError,
                   typ: str = "safe", max_bytes: int = MAX_YAML_FILE_BYTES, not_found_hint: str = "") -> Any:
    """Read and load one YAML 1.2 file (UTF-8, a BOM allowed) with :func:`parse_yaml`.

    Only a regular file of at most ``max_bytes`` bytes is read: the file is
    opened non-blocking (a FIFO never blocks the open), a FIFO, device or
    folder is refused after ``fstat``, and at most ``max_bytes + 1`` bytes
    are ever read (a file that grows while read is refused, not read
    forever).  ``what`` names the file in messages (``config file``,
    ``script file``, ``marketplace index``); ``not_found_hint`` is appended
    to the not-found message.

    Raises ``error`` with one of: ``<what> not found: <path>[ (looked for <absolute path>)]<hint>``
    (the absolute path when ``path`` is relative),
    ``<what> <path> is not a regular file``, ``<what> <path> is too large
    (<n> bytes; limit <max>)``, ``cannot read <what> <path>: <reason>``, or
    :func:`parse_yaml`'s invalid-YAML message.
    """
    p = Path(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(p, flags)
    except FileNotFoundError:
        # a relative path is looked up from the current folder: say which, so "run it from the
        # repository root" is plain from the message
        where = "" if p.is_absolute() else f" (looked for {Path.cwd() / p})"
        raise error(f"{what} not found: {p}{where}{not_found_hint}") from None
    except OSError as exc:
        raise error(f"cannot read {what} {p}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise error(f"{what} {p} is not a regular file")
            if st.st_size > max_bytes:
                raise error(f"{what} {p} is too large ({st.st_size:,} bytes; limit {max_bytes:,})")
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise error(f"cannot read {what} {p}: {exc.strerror or exc}") from None
    if len(raw) > max_bytes:
        raise error(f"{what} {p} is too large (more than {max_bytes:,} bytes)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"cannot read {what} {p}: {exc}") from None
    return parse_yaml(text, str(p), error=error, typ=typ)
