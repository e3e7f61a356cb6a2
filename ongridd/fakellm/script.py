"""The scripted model's script: load, validate, substitute (docs/architecture.md §16).

A script is a YAML mapping ``persona name → list of steps``.  A step is a
mapping with these keys (at least one of ``content``, ``tool_calls``,
``content_from_tool_results``, ``http_status``):

=============================  ==============================================
``content``                    the assistant text (string)
``tool_calls``                 list of ``{name, arguments}`` (``arguments``:
                               any JSON value, sent as JSON text; absent →
                               ``{}``) or ``{name, raw_arguments}``
                               (``raw_arguments``: the exact text sent, e.g.
                               invalid JSON, or ``""``)
``content_from_tool_results``  ``true``: answer with the tool results received
                               since the previous step (not with ``content``);
                               ``reports``: the same, with each ``AgentTool``
                               result given as the worker's report alone;
                               ``markdown``: as ``reports``, each other
                               result laid out for a person (its tool's name
                               in bold, its JSON indented in a code block)
``finish_reason``              ``stop``, ``length``, ``tool_calls``,
                               ``content_filter`` (default: ``tool_calls``
                               when there are tool calls, else ``stop``)
``delay_s``                    seconds to wait before answering (>= 0)
``http_status``                answer with this HTTP error (400–599) instead;
                               only ``delay_s`` and ``retry_after`` may go
                               with it
``retry_after``                with ``http_status``: the ``Retry-After``
                               header sent — seconds (a number >= 0) or a
                               string sent as is (e.g. an HTTP-date)
``usage``                      the token usage to report: a mapping with any of
                               ``prompt_tokens``, ``completion_tokens``,
                               ``cached_tokens`` (integers >= 0; a key left
                               out keeps the estimate, cached defaults to 0)
=============================  ==============================================

``${NAME}`` in any string (content, tool names, argument keys and values,
raw arguments) is replaced by the environment variable ``NAME`` of the
server process when the step is answered (:func:`substitute`).

Errors are :class:`ScriptError` (a :class:`~ongridd.errors.ConfigError`)
naming the file, the line, the persona and the step index.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from ongridd.yamlbounds import parse_yaml, read_yaml_file
from ongridd.errors import ConfigError

FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter")
STEP_KEYS = ("content", "tool_calls", "content_from_tool_results", "finish_reason", "delay_s", "http_status",
             "usage", "retry_after")
USAGE_KEYS = ("prompt_tokens", "completion_tokens", "cached_tokens")
CALL_KEYS = ("name", "arguments", "raw_arguments", "id")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class ScriptError(ConfigError):
    """A scripted-model script cannot be used.  The message names the file
    and line, and the persona and step index where it applies."""


class MissingVariable(ScriptError):
    """A ``${NAME}`` in a step names an environment variable that is not set."""


@attrs.frozen(kw_only=True)
class ScriptedToolCall:
    """One tool call of a step.  Exactly one of ``arguments`` (a JSON value)
    and ``raw_arguments`` (text sent as is) is used; ``raw_arguments`` wins
    when it is not ``None``."""

    name: str
    arguments: Any = attrs.field(factory=dict)
    raw_arguments: str | None = None
    #: the call's id as sent (``${VAR}`` substituted); None: ``call_<step>_<n>``
    id: str | None = None


@attrs.frozen(kw_only=True)
class Step:
    """One scripted answer.  ``persona``/``index``/``line`` locate it."""

    persona: str
    index: int
    line: int | None = None
    content: str | None = None
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    content_from_tool_results: bool | str = False  # False, True, "reports" or "markdown"
    finish_reason: str | None = None
    delay_s: float = 0.0
    http_status: int | None = None
    retry_after: str | None = None
    #: explicit usage numbers (keys of ``USAGE_KEYS``) to report instead of the estimate
    usage: Mapping[str, int] | None = None

    @property
    def where(self) -> str:
        """``persona 'x' step 2`` — for messages."""
        return f"persona {self.persona!r} step {self.index}"


@attrs.frozen(kw_only=True)
class Script:
    """A validated script.  ``personas``: persona name → its steps, in order.
    ``source``: the file it came from (or ``<string>``)."""

    personas: Mapping[str, tuple[Step, ...]]
    source: str = "<string>"

    def variables(self) -> set[str]:
        """Every ``${NAME}`` the script uses."""
        names: set[str] = set()
        for steps in self.personas.values():
            for step in steps:
                _collect_vars(attrs.asdict(step, recurse=True), names)
        return names


def _collect_vars(value: Any, names: set[str]) -> None:
    if isinstance(value, str):
        names.update(_VAR.findall(value))
    elif isinstance(value, Mapping):
        for k, v in value.items():
            _collect_vars(k, names)
            _collect_vars(v, names)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _collect_vars(v, names)


def substitute(value: Any, env: Mapping[str, str], where: str = "") -> Any:
    """Replace ``${NAME}`` in every string of ``value`` (recursing into dicts,
    keys included, and lists) with ``env[NAME]``.

    Raises :class:`MissingVariable` naming the variable (and ``where``) when
    it is not set.
    """
    if isinstance(value, str):
        def repl(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in env:
                at = f"{where}: " if where else ""
                raise MissingVariable(
                    f"{at}${{{name}}} is used but the environment variable {name} is not set "
                    "in the scripted model server's process"
                )
            return env[name]

        return _VAR.sub(repl, value)
    if isinstance(value, Mapping):
        return {substitute(k, env, where): substitute(v, env, where) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [substitute(v, env, where) for v in value]
    return value


# ---- loading --------------------------------------------------------------


def load_script(path: str | os.PathLike[str]) -> Script:
    """Read and validate a script file (UTF-8, YAML 1.2).

    Raises :class:`ScriptError` for a missing, unreadable, non-regular or
    too large (over 1 MiB) file, invalid YAML (with its line) or an invalid
    step (every problem, one per line).
    """
    p = Path(path)
    data = read_yaml_file(p, what="script file", error=ScriptError, typ="rt")
    return script_from_data(data, source=str(p))


def parse_script(text: str, *, source: str = "<string>") -> Script:
    """Parse and validate script text.  Raises :class:`ScriptError`."""
    data = parse_yaml(text, source, error=ScriptError, typ="rt")
    return script_from_data(data, source=source)


def coerce_script(script: Script | Mapping[str, Any] | str | os.PathLike[str]) -> Script:
    """A :class:`Script` from a Script (as is), a mapping (validated) or a
    path to a YAML file (loaded)."""
    if isinstance(script, Script):
        return script
    if isinstance(script, Mapping):
        return script_from_data(script, source="<mapping>")
    return load_script(script)


def script_from_data(data: Any, *, source: str = "<mapping>") -> Script:
    """Validate already-parsed data (as from YAML or a Python dict).

    Raises :class:`ScriptError` listing every problem found, each as
    ``<source>:<line>: persona '<name>' step <i>: <problem>``.
    """
    problems: list[str] = []
    if data is None:
        raise ScriptError(f"{source}: the script is empty; expected a mapping of persona name → list of steps")
    if not isinstance(data, Mapping):
        raise ScriptError(
            f"{source}: the script must be a mapping of persona name → list of steps, got {_kind(data)}"
        )
    personas: dict[str, tuple[Step, ...]] = {}
    for key, steps_data in data.items():
        key_line = _key_line(data, key)
        at = f"{source}{_fmt_line(key_line)}"
        if not isinstance(key, str) or not key.strip():
            problems.append(f"{at}: persona name must be a non-empty string, got {key!r}")
            continue
        if not isinstance(steps_data, list):
            problems.append(f"{at}: persona {key!r}: expected a list of steps, got {_kind(steps_data)}")
            continue
        steps = []
        for index, raw in enumerate(steps_data):
            line = _item_line(steps_data, index)
            here = f"{source}{_fmt_line(line)}: persona {key!r} step {index}"
            step = _parse_step(raw, persona=key, index=index, line=line, here=here, problems=problems)
            if step is not None:
                steps.append(step)
        personas[key] = tuple(steps)
    if problems:
        raise ScriptError(f"invalid scripted-model script {source}:\n  " + "\n  ".join(problems))
    return Script(personas=personas, source=source)


def _parse_step(
    raw: Any, *, persona: str, index: int, line: int | None, here: str, problems: list[str]
) -> Step | None:
    before = len(problems)
    if not isinstance(raw, Mapping):
        problems.append(f"{here}: a step must be a mapping, got {_kind(raw)}")
        return None
    unknown = [k for k in raw if k not in STEP_KEYS]
    if unknown:
        problems.append(
            f"{here}: unknown key(s) {', '.join(repr(k) for k in unknown)}; allowed: {', '.join(STEP_KEYS)}"
        )

    content = raw.get("content")
    if content is not None and not isinstance(content, str):
        problems.append(f"{here}: content must be a string, got {_kind(content)}")

    from_results = raw.get("content_from_tool_results", False)
    if not isinstance(from_results, bool) and from_results not in ("reports", "markdown"):
        problems.append(f"{here}: content_from_tool_results must be true, false, reports or markdown, got "
                        f"{_kind(from_results) if not isinstance(from_results, str) else repr(from_results)}")
        from_results = False
    elif from_results and content is not None:
        problems.append(f"{here}: content and content_from_tool_results cannot be used together")

    finish_reason = raw.get("finish_reason")
    if finish_reason is not None and finish_reason not in FINISH_REASONS:
        problems.append(f"{here}: finish_reason must be one of {', '.join(FINISH_REASONS)}, got {finish_reason!r}")

    delay_s = raw.get("delay_s", 0)
    if isinstance(delay_s, bool) or not isinstance(delay_s, (int, float)) or not math.isfinite(delay_s) or delay_s < 0:
        problems.append(f"{here}: delay_s must be a number of seconds >= 0, got {delay_s!r}")
        delay_s = 0

    http_status = raw.get("http_status")
    if http_status is not None:
        if isinstance(http_status, bool) or not isinstance(http_status, int) or not 400 <= http_status <= 599:
            problems.append(f"{here}: http_status must be an HTTP error status 400..599, got {http_status!r}")
        others = [k for k in ("content", "tool_calls", "content_from_tool_results", "finish_reason", "usage")
                  if k in raw]
        if others:
            problems.append(f"{here}: http_status answers with an error only; remove {', '.join(others)}")
    retry_after = raw.get("retry_after")
    if retry_after is not None:
        if http_status is None:
            problems.append(f"{here}: retry_after goes with http_status (e.g. http_status: 429)")
        if isinstance(retry_after, bool) or not (
                (isinstance(retry_after, (int, float)) and math.isfinite(retry_after) and retry_after >= 0)
                or (isinstance(retry_after, str) and retry_after.strip())):
            problems.append(f"{here}: retry_after must be seconds >= 0 or a non-empty string, got {retry_after!r}")
            retry_after = None
        elif not isinstance(retry_after, str):
            retry_after = f"{retry_after:g}"

    usage = raw.get("usage")
    if usage is not None:
        if not isinstance(usage, Mapping) or not usage:
            problems.append(f"{here}: usage must be a mapping with {', '.join(USAGE_KEYS)}, got {_kind(usage)}")
            usage = None
        else:
            bad = [k for k in usage if k not in USAGE_KEYS]
            if bad:
                problems.append(f"{here}: usage: unknown key(s) {', '.join(repr(k) for k in bad)}; "
                                f"allowed: {', '.join(USAGE_KEYS)}")
            for k, v in usage.items():
                if k in USAGE_KEYS and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                    problems.append(f"{here}: usage.{k} must be an integer >= 0, got {v!r}")
            usage = {k: int(v) for k, v in usage.items() if k in USAGE_KEYS}

    calls: list[ScriptedToolCall] = []
    if "tool_calls" in raw:
        calls_data = raw["tool_calls"]
        if not isinstance(calls_data, list) or not calls_data:
            problems.append(f"{here}: tool_calls must be a non-empty list, got {_kind(calls_data)}")
        else:
            for n, call in enumerate(calls_data):
                parsed = _parse_call(call, f"{here} tool_calls[{n}]", problems)
                if parsed is not None:
                    calls.append(parsed)

    if not any(k in raw for k in ("content", "tool_calls", "http_status")) and not from_results:
        problems.append(
            f"{here}: a step needs content, tool_calls, content_from_tool_results (true, reports or markdown) or "
            "http_status"
        )
    if len(problems) != before:
        return None
    return Step(
        persona=persona,
        index=index,
        line=line,
        content=content,
        tool_calls=tuple(calls),
        content_from_tool_results=from_results,
        finish_reason=finish_reason,
        delay_s=float(delay_s),
        http_status=http_status,
        retry_after=retry_after,
        usage=usage,
    )


def _parse_call(raw: Any, here: str, problems: list[str]) -> ScriptedToolCall | None:
    if not isinstance(raw, Mapping):
        problems.append(f"{here}: a tool call must be a mapping with name and arguments, got {_kind(raw)}")
        return None
    unknown = [k for k in raw if k not in CALL_KEYS]
    if unknown:
        problems.append(f"{here}: unknown key(s) {', '.join(repr(k) for k in unknown)}; allowed: {', '.join(CALL_KEYS)}")
        return None
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        problems.append(f"{here}: name must be a non-empty string, got {name!r}")
        return None
    if "arguments" in raw and "raw_arguments" in raw:
        problems.append(f"{here}: use arguments or raw_arguments, not both")
        return None
    call_id = raw.get("id")
    if call_id is not None and not (isinstance(call_id, str) and call_id):
        problems.append(f"{here}: id must be a non-empty string (the call's id as sent), got {_kind(call_id)}")
        return None
    if "raw_arguments" in raw:
        text = raw["raw_arguments"]
        if not isinstance(text, str):
            problems.append(f"{here}: raw_arguments must be a string (the exact text sent), got {_kind(text)}")
            return None
        return ScriptedToolCall(name=name, raw_arguments=text, id=call_id)
    try:
        arguments = _plain_json(raw.get("arguments", {}))
    except (TypeError, ValueError) as exc:
        problems.append(f"{here}: arguments {exc}")
        return None
    return ScriptedToolCall(name=name, arguments=arguments, id=call_id)


def _plain_json(value: Any) -> Any:
    """ruamel's round-trip types → plain JSON values; TypeError/ValueError
    for values JSON cannot carry."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"hold a number JSON cannot carry: {value!r}")
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"must have string keys, got {k!r}")
            out[str(k)] = _plain_json(v)
        return out
    if isinstance(value, (list, tuple)):
        return [_plain_json(v) for v in value]
    raise TypeError(f"must be JSON values, got {type(value).__name__} {value!r}")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return f"a string ({value!r})" if len(value) < 40 else "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _key_line(mapping: Any, key: Any) -> int | None:
    try:
        return mapping.lc.key(key)[0] + 1
    except (AttributeError, KeyError, TypeError):
        return None


def _item_line(seq: Any, index: int) -> int | None:
    try:
        return seq.lc.item(index)[0] + 1
    except (AttributeError, KeyError, IndexError, TypeError):
        return None


def _fmt_line(line: int | None) -> str:
    return f":{line}" if line is not None else ""
