"""Loading a suite: a folder of incident YAML files, one incident each.

Incident file (YAML 1.2, UTF-8, at most ``MAX_FILE_BYTES``)::

    name: disk-full-db2                  # letters, digits, - _ . (unique in the suite)
    question: "db-2 is almost out of disk, why?"
    script: scripts/disk-full-db2.yaml   # optional; relative to the incident file
    hosts:                               # optional: the inventory the daemon is configured with
      - {name: db-2, labels: {role: db}}
    backends: {prometheus: true, loki: false, tempo: false, topology: false}   # optional
    fixtures:                            # the first matching entry answers a call
      - tool: host_du_summary
        match: {host: db-2}              # optional: argument values that must be equal
        result: {...}                    # JSON value or text
      - tool: host_probe_dns
        match: {server: 10.0.0.2}
        error: "no answer from DNS server 10.0.0.2:53 within 5 s"   # or: the call fails with this
    expected:
      root_cause: [db-2, /var/lib/postgresql/pg_wal, replication slot]
      distractors: [backup job]          # optional
      max_tool_calls: 12

Only ``*.yaml`` files directly in the folder are incidents; subfolders hold
scripts and shared data.  Every problem is an :class:`IncidentError` naming
the file (and the line where the YAML parser knows it); a suite with any
bad incident is refused as a whole, so a typo never silently shrinks it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ongridd.errors import ConfigError
from ongridd.yamlbounds import read_yaml_file

#: an incident file larger than this is refused (recorded outputs included)
MAX_FILE_BYTES = 1 << 20
#: at most this many incident files in one suite
MAX_INCIDENTS = 1000
MAX_FIXTURES = 200
MAX_ENTITIES = 50
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,79}\Z")
BACKEND_NAMES = ("prometheus", "loki", "tempo", "topology")


class IncidentError(ConfigError):
    """An incident file that cannot be used (the message names the file)."""


@attrs.frozen(kw_only=True)
class Fixture:
    """``tool``: tool name; ``match``: argument values that must be equal
    (empty: any call); ``result``: the recorded result (JSON value or text);
    ``error``: instead of a result, the call fails with this message (as a
    real tool's error result)."""

    tool: str
    match: Mapping[str, Any] = attrs.field(factory=dict)
    result: Any = None
    error: str | None = None


@attrs.frozen(kw_only=True)
class Incident:
    name: str
    question: str
    source: Path
    fixtures: tuple[Fixture, ...]
    root_cause: tuple[str, ...]
    distractors: tuple[str, ...] = ()
    max_tool_calls: int | None = None
    script: Path | None = None
    hosts: tuple[tuple[str, Mapping[str, str]], ...] = ()
    backends: Mapping[str, bool] = attrs.field(factory=dict)


def _entities(value: Any, field: str, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise IncidentError(f"{where}: expected.{field} must be a list of non-empty strings")
    if len(value) > MAX_ENTITIES:
        raise IncidentError(f"{where}: expected.{field} has more than {MAX_ENTITIES} entries")
    return tuple(v.strip() for v in value)


def _fixture(raw: Any, i: int, where: str) -> Fixture:
    if not isinstance(raw, Mapping):
        raise IncidentError(f"{where}: fixtures[{i}] must be a mapping with tool, optional match, result or error")
    unknown = set(raw) - {"tool", "match", "result", "error"}
    if unknown:
        raise IncidentError(f"{where}: fixtures[{i}] has unknown keys {sorted(unknown)}")
    tool = raw.get("tool")
    if not isinstance(tool, str) or not re.fullmatch(r"[A-Za-z0-9_\-]{1,64}", tool):
        raise IncidentError(f"{where}: fixtures[{i}].tool must be a tool name")
    match = raw.get("match") or {}
    if not isinstance(match, Mapping):
        raise IncidentError(f"{where}: fixtures[{i}].match must be a mapping of argument values")
    if ("result" in raw) == ("error" in raw):
        raise IncidentError(f"{where}: fixtures[{i}] ({tool}) needs exactly one of result or error")
    error = raw.get("error")
    if "error" in raw and (not isinstance(error, str) or not error.strip()):
        raise IncidentError(f"{where}: fixtures[{i}].error must be a non-empty string")
    return Fixture(tool=tool, match=_plain(match), result=_plain(raw.get("result")), error=error)


def _plain(value: Any) -> Any:
    """ruamel values → plain JSON values (str, int, float, bool, None, list, dict)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def load_incident(path: Path) -> Incident:
    """Read and check one incident file.  Raises :class:`IncidentError`."""
    where = str(path)
    data = read_yaml_file(path, what="incident file", error=IncidentError, max_bytes=MAX_FILE_BYTES)
    if not isinstance(data, Mapping):
        raise IncidentError(f"{where}: an incident is a mapping with name, question, fixtures, expected")
    unknown = set(data) - {"name", "question", "fixtures", "expected", "script", "hosts", "backends",
                           "description"}
    if unknown:
        raise IncidentError(f"{where}: unknown keys {sorted(unknown)}")
    name = data.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise IncidentError(f"{where}: name must be letters, digits, '-', '_' or '.' (at most 80)")
    question = data.get("question")
    if not isinstance(question, str) or not question.strip():
        raise IncidentError(f"{where}: question must be a non-empty string")
    fixtures_raw = data.get("fixtures") or []
    if not isinstance(fixtures_raw, list) or len(fixtures_raw) > MAX_FIXTURES:
        raise IncidentError(f"{where}: fixtures must be a list of at most {MAX_FIXTURES} entries")
    fixtures = tuple(_fixture(f, i, where) for i, f in enumerate(fixtures_raw))
    expected = data.get("expected")
    if not isinstance(expected, Mapping):
        raise IncidentError(f"{where}: expected must be a mapping with root_cause")
    unknown = set(expected) - {"root_cause", "distractors", "max_tool_calls"}
    if unknown:
        raise IncidentError(f"{where}: expected has unknown keys {sorted(unknown)}")
    root_cause = _entities(expected.get("root_cause"), "root_cause", where)
    if not root_cause:
        raise IncidentError(f"{where}: expected.root_cause must name at least one entity")
    distractors = _entities(expected.get("distractors"), "distractors", where)
    max_calls = expected.get("max_tool_calls")
    if max_calls is not None and (isinstance(max_calls, bool) or not isinstance(max_calls, int) or max_calls < 0):
        raise IncidentError(f"{where}: expected.max_tool_calls must be an integer >= 0")
    script = data.get("script")
    script_path = None
    if script is not None:
        if not isinstance(script, str) or not script.strip() or Path(script).is_absolute():
            raise IncidentError(f"{where}: script must be a path relative to the incident file")
        script_path = (path.parent / script).resolve()
    return Incident(name=name, question=question.strip(), source=path, fixtures=fixtures,
                    root_cause=root_cause, distractors=distractors, max_tool_calls=max_calls,
                    script=script_path, hosts=_hosts(data.get("hosts"), where),
                    backends=_backends(data.get("backends"), where))


def _hosts(raw: Any, where: str) -> tuple[tuple[str, Mapping[str, str]], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > 200:
        raise IncidentError(f"{where}: hosts must be a list of at most 200 {{name, labels}}")
    out = []
    for i, h in enumerate(raw):
        if not isinstance(h, Mapping) or not isinstance(h.get("name"), str) or not _NAME_RE.match(h["name"]):
            raise IncidentError(f"{where}: hosts[{i}] needs a name (letters, digits, - _ .)")
        labels = h.get("labels") or {}
        if not isinstance(labels, Mapping):
            raise IncidentError(f"{where}: hosts[{i}].labels must be a mapping")
        out.append((h["name"], {str(k): str(v) for k, v in labels.items()}))
    return tuple(out)


def _backends(raw: Any, where: str) -> Mapping[str, bool]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or set(raw) - set(BACKEND_NAMES) or not all(
            isinstance(v, bool) for v in raw.values()):
        raise IncidentError(f"{where}: backends maps {', '.join(BACKEND_NAMES)} to true/false")
    return {str(k): bool(v) for k, v in raw.items()}


def load_suite(folder: Path, only: Sequence[str] = ()) -> list[Incident]:
    """Every ``*.yaml`` incident directly in ``folder``, sorted by file name.

    ``only``: keep just these incident names (an unknown name is an error
    listing the known ones).  Raises :class:`IncidentError` for a missing
    folder, a bad file, a duplicate name or an empty selection.
    """
    if not folder.is_dir():
        raise IncidentError(f"{folder}: no such suite folder")
    files = sorted(p for p in folder.glob("*.yaml") if p.is_file())
    if len(files) > MAX_INCIDENTS:
        raise IncidentError(f"{folder}: more than {MAX_INCIDENTS} incident files")
    incidents = [load_incident(p) for p in files]
    seen: dict[str, Path] = {}
    for inc in incidents:
        if inc.name in seen:
            raise IncidentError(f"{inc.source}: incident name {inc.name!r} is also used by {seen[inc.name]}")
        seen[inc.name] = inc.source
    if only:
        missing = [n for n in only if n not in seen]
        if missing:
            raise IncidentError(f"no incident named {', '.join(missing)} in {folder} "
                                f"(known: {', '.join(sorted(seen))})")
        incidents = [inc for inc in incidents if inc.name in set(only)]
    if not incidents:
        raise IncidentError(f"{folder}: no incidents (*.yaml files) found")
    return incidents
