"""Configuration: ruamel.yaml → cattrs (strict) → frozen attrs classes.

Precedence: command-line flag > ``ONGRID_*`` environment variable > file >
default.  Every key is optional.  Unknown keys and wrong types are refused
with field paths (``invalid value for type, expected int @
config.llm.timeout_s``).  Secrets are never stored here: the config names
the environment variables that hold them (``llm.api_key_env``,
``server.tokens_env``, plugin settings ending in ``_env``); the daemon reads
them once at start-up and then removes them from its environment (see
:mod:`ongridd.secretset`), and :func:`read_secret` still finds them.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import cattrs
from cattrs.errors import ForbiddenExtraKeysError, IterableValidationError, IterableValidationNote
from cattrs.gen import make_dict_structure_fn

from ongridd.errors import ConfigError
from ongridd.typenames import type_name
# the one bounded YAML reader; parse_yaml/read_yaml_file stay importable from here
from ongridd.yamlbounds import MAX_YAML_FILE_BYTES, parse_yaml, read_yaml_file  # noqa: F401 - re-exported

DEFAULT_LISTEN = "127.0.0.1:8650"
DEFAULT_CONFIG_PATHS = ("/etc/ongrid/ongrid.yaml",)


@attrs.frozen(kw_only=True)
class ServerConfig:
    listen: str = DEFAULT_LISTEN
    tokens_env: str = "ONGRID_TOKENS"
    default_locale: str | None = None
    #: False: with tokens configured, ``/metrics`` needs a bearer token like the API
    metrics_public: bool = False
    #: the users who may change personas and install or remove plugins (``PUT``/``DELETE
    #: /api/agents/…``, ``POST /api/marketplace/…``); None: every user (with no tokens, ``local``)
    admins: tuple[str, ...] | None = None


@attrs.frozen(kw_only=True)
class DatabaseConfig:
    url: str | None = attrs.field(default=None, repr=lambda v: "<set>" if v else "None")
    #: connections (and worker threads) the daemon uses at most
    pool_size: int = attrs.field(default=8, validator=attrs.validators.ge(1))


@attrs.frozen(kw_only=True)
class LLMConfig:
    base_url: str | None = None
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 120.0
    #: the longest one attempt of a model call may take, request sent to the answer's last byte
    #: (a server streaming without end, or trickling, is cut off; seconds)
    call_timeout_s: float = 600.0
    max_retries: int = 3
    #: model calls in flight to the provider at once (later calls wait their turn, first come
    #: first served); also the HTTP connections kept to it
    max_concurrent_calls: int = 64
    #: the model's context window in tokens, when known (None: unknown, only
    #: ``limits.history_max_chars`` bounds a thread's history; see
    #: ongridd/runtime/compaction.py for the token estimate)
    context_tokens: int | None = None


@attrs.frozen(kw_only=True)
class PromptConfig:
    base: str = ""


@attrs.frozen(kw_only=True)
class LimitsConfig:
    tool_result_max_chars: int = 16000
    worker_timeout_s: float = 600.0
    reviewer_timeout_s: float = 60.0
    #: turn admission (ongridd/runtime/admission.py): running coordinator turns
    #: in the whole daemon / per user, and turns waiting for a slot
    max_concurrent_turns: int = 64
    max_turns_per_user: int = 4
    max_queued_turns: int = 256
    #: the most characters of a coordinator thread's history sent to the model
    #: (older turns are replaced by a stored summary; ongridd/runtime/compaction.py)
    history_max_chars: int = 200_000


@attrs.frozen(kw_only=True)
class DirsConfig:
    user_dirs: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class KnowledgeConfig:
    dirs: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class PrometheusConfig:
    url: str | None = None


@attrs.frozen(kw_only=True)
class LogsConfig:
    """``logs``: ``dirs`` the folders search_logs may read (absolute paths);
    ``journal_dirs`` extra journal folders read with ``journalctl --directory``."""

    dirs: tuple[str, ...] = ("/var/log",)
    journal_dirs: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class UrlConfig:
    """A server's base URL (``loki.url``, ``tempo.url``); None = not configured."""

    url: str | None = None


@attrs.frozen(kw_only=True)
class TopologyConfig:
    """``topology.files``: YAML service-graph files, later ones override earlier ones."""

    files: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class HostConfig:
    name: str
    address: str = ""
    ssh_user: str | None = None
    ssh_port: int = 22
    ssh_key: str | None = None
    labels: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class PluginsConfig:
    disabled: tuple[str, ...] = ()
    settings: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class MarketplaceConfig:
    #: the index file; None (not set): ``marketplace/index.yaml`` in the
    #: working directory if there is one, else the built-in index, silently
    index: str | None = None


@attrs.frozen(kw_only=True)
class RetentionConfig:
    #: days a closed session is kept (None: forever); the daily sweep of
    #: ongridd/store/retention.py deletes what is older
    days: float | None = None


@attrs.frozen(kw_only=True)
class Config:
    """The whole configuration (docs/architecture.md §15.2). ``source``: the file read, if any."""

    server: ServerConfig = ServerConfig()
    state_dir: str = "./var"
    database: DatabaseConfig = DatabaseConfig()
    llm: LLMConfig = LLMConfig()
    prompt: PromptConfig = PromptConfig()
    limits: LimitsConfig = LimitsConfig()
    agents: DirsConfig = DirsConfig()
    skills: DirsConfig = DirsConfig()
    knowledge: KnowledgeConfig = KnowledgeConfig()
    prometheus: PrometheusConfig = PrometheusConfig()
    logs: LogsConfig = LogsConfig()
    loki: UrlConfig = UrlConfig()
    tempo: UrlConfig = UrlConfig()
    topology: TopologyConfig = TopologyConfig()
    hosts: tuple[HostConfig, ...] = ()
    plugins: PluginsConfig = PluginsConfig()
    marketplace: MarketplaceConfig = MarketplaceConfig()
    retention: RetentionConfig = RetentionConfig()
    source: str | None = None

    @property
    def state_path(self) -> Path:
        return Path(self.state_dir)

    @property
    def database_url(self) -> str:
        """The SQLAlchemy URL: config, else the SQLite file in the state dir."""
        if self.database.url:
            return self.database.url
        return f"sqlite:///{(self.state_path / 'ongrid.db').absolute()}"

    @property
    def state_agents_dir(self) -> Path:
        """<state>/agents: always a user agents root (the daemon creates it at start)."""
        return self.state_path / "agents"

    @property
    def agents_write_dir(self) -> Path:
        """Where ``PUT /api/agents`` writes: the first user dir, else <state>/agents."""
        if self.agents.user_dirs:
            return Path(self.agents.user_dirs[0])
        return self.state_agents_dir

    @property
    def agent_user_roots(self) -> tuple[Path, ...]:
        roots = [Path(d) for d in self.agents.user_dirs]
        fallback = self.state_agents_dir
        if fallback not in roots:
            roots.append(fallback)
        return tuple(roots)

    def host_names(self) -> tuple[str, ...]:
        return ("local",) + tuple(h.name for h in self.hosts if h.name != "local")


# ---- strict structuring ----------------------------------------------------


def _strict_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)

    def _int(v: Any, _t: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"expected integer, got {type_name(v)}")
        return v

    def _float(v: Any, _t: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"expected number, got {type_name(v)}")
        if not math.isfinite(v):
            raise ValueError(f"expected a finite number, got {v}")
        return float(v)

    def _str(v: Any, _t: Any) -> str:
        if not isinstance(v, str):
            raise TypeError(f"expected string, got {type_name(v)}")
        return v

    def _bool(v: Any, _t: Any) -> bool:
        if not isinstance(v, bool):
            raise TypeError(f"expected boolean, got {type_name(v)}")
        return v

    def _mapping(v: Any, _t: Any) -> dict:
        if not isinstance(v, Mapping):
            raise TypeError(f"expected object, got {type_name(v)}")
        return _plain(v)

    def _str_mapping(v: Any, _t: Any) -> dict:
        if not isinstance(v, Mapping):
            raise TypeError(f"expected object, got {type_name(v)}")
        out = {}
        for k, val in v.items():
            if not isinstance(val, (str, int, float)) or isinstance(val, bool):
                raise TypeError(f"label {k!r}: expected string, got {type_name(val)}")
            out[str(k)] = str(val)
        return out

    conv.register_structure_hook(int, _int)
    conv.register_structure_hook(float, _float)
    conv.register_structure_hook(str, _str)
    conv.register_structure_hook(bool, _bool)
    conv.register_structure_hook_func(lambda t: t == Mapping[str, Any], _mapping)
    conv.register_structure_hook_func(lambda t: t == Mapping[str, str], _str_mapping)

    def _seq_hook(t: Any) -> Any:
        (item,) = t.__args__[:1]

        def hook(v: Any, _t: Any) -> tuple:
            if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple)):
                raise TypeError(f"expected array, got {type_name(v)}")
            out, errors = [], []
            for i, x in enumerate(v):
                try:
                    out.append(conv.structure(x, item))
                except Exception as exc:  # noqa: BLE001 - keep going: report every bad item with its index
                    exc.__notes__ = [*getattr(exc, "__notes__", []),
                                     IterableValidationNote(f"Structuring {t} @ index {i}", i, item)]
                    errors.append(exc)
            if errors:
                raise IterableValidationError(f"While structuring {t}", errors, t)
            return tuple(out)

        return hook

    conv.register_structure_hook_factory(
        lambda t: getattr(t, "__origin__", None) is tuple
        and len(getattr(t, "__args__", ())) == 2
        and t.__args__[1] is Ellipsis,
        _seq_hook,
    )
    for cls in (ServerConfig, DatabaseConfig, LLMConfig, PromptConfig, LimitsConfig, DirsConfig,
                KnowledgeConfig, PrometheusConfig, HostConfig, PluginsConfig, MarketplaceConfig, Config):
        conv.register_structure_hook(cls, make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=True))
    return conv


MAX_CONFIG_NODES = 100_000
MAX_CONFIG_BYTES = MAX_YAML_FILE_BYTES


def _plain(v: Any, _budget: list[int] | None = None, _path: frozenset[int] = frozenset()) -> Any:
    """ruamel's CommentedMap/Seq → plain dict/list.

    Raises ConfigError for a recursive alias or a document that expands
    (through aliases) to more than ``MAX_CONFIG_NODES`` values.
    """
    budget = [MAX_CONFIG_NODES] if _budget is None else _budget
    budget[0] -= 1
    if budget[0] < 0:
        raise ConfigError(f"the configuration expands to more than {MAX_CONFIG_NODES:,} values "
                          "(YAML aliases?); refusing it")
    if isinstance(v, (Mapping, list, tuple)):
        if id(v) in _path:
            raise ConfigError("the configuration contains a recursive YAML alias")
        path = _path | {id(v)}
        if isinstance(v, Mapping):
            return {str(k): _plain(x, budget, path) for k, x in v.items()}
        return [_plain(x, budget, path) for x in v]
    return v


_CONVERTER = _strict_converter()

ENV_OVERRIDES = {
    "ONGRID_LISTEN": ("server", "listen"),
    "ONGRID_STATE_DIR": ("state_dir",),
    "ONGRID_DATABASE_URL": ("database", "url"),
    "ONGRID_LLM_BASE_URL": ("llm", "base_url"),
    "ONGRID_LLM_MODEL": ("llm", "model"),
    "ONGRID_PROMETHEUS_URL": ("prometheus", "url"),
    "ONGRID_LOKI_URL": ("loki", "url"),
    "ONGRID_TEMPO_URL": ("tempo", "url"),
}


def _set_path(data: dict, path: tuple[str, ...], value: Any) -> None:
    node = data
    for key in path[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {} if child is None else child
            node[key] = child
        node = child
    node[path[-1]] = value


#: Python types named in the one vocabulary of type names (JSON Schema's, see ongridd.typenames)
_TYPE_WORDS: dict[Any, str] = {int: "integer", float: "number", str: "string", bool: "boolean"}


def _format_exception(exc: BaseException, type_: Any) -> str:
    """cattrs' message for one bad value, with JSON Schema type names (``expected integer``, not ``int``)."""
    if isinstance(exc, (TypeError, ValueError)) and type_ in _TYPE_WORDS:
        return f"invalid value for type, expected {_TYPE_WORDS[type_]}"
    if isinstance(exc, ForbiddenExtraKeysError) and attrs.has(exc.cl):
        # a misspelt key: name the field it was most likely meant to be, as persona files do
        known = [f.name for f in attrs.fields(exc.cl)]
        named = []
        for key in sorted(exc.extra_fields):
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
            named.append(f"{key}, did you mean {close[0]!r}?" if close else key)
        return f"extra fields found ({'; '.join(named)})"
    message = cattrs.v.format_exception(exc, type_)
    return "expected an object" if message == "expected a mapping" else message


def structure(data: Mapping[str, Any], *, source: str | None = None) -> Config:
    """Structure a plain mapping into :class:`Config`.

    Raises ConfigError whose message lists every problem as
    ``<what> @ config.<path>``.
    """
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source or 'config'}: the top level must be an object (a mapping of keys), got {type_name(data)}")
    data = dict(_plain(data))
    data.pop("source", None)
    try:
        cfg = _CONVERTER.structure(data, Config)
    except Exception as exc:  # noqa: BLE001 - cattrs ClassValidationError / ForbiddenExtraKeysError / hooks' own
        msgs = (cattrs.transform_error(exc, path="config", format_exception=_format_exception)
                if isinstance(exc, cattrs.BaseValidationError) else [str(exc)])
        where = f"{source}: " if source else ""
        raise ConfigError(where + "invalid configuration:\n  " + "\n  ".join(msgs)) from None
    _validate(cfg, source)
    return attrs.evolve(cfg, source=source)


def _validate(cfg: Config, source: str | None) -> None:
    problems = []
    if not cfg.state_dir.strip():
        problems.append("must not be empty @ config.state_dir")
    try:
        parse_listen(cfg.server.listen)
    except ConfigError as exc:
        problems.append(f"{exc} @ config.server.listen")
    if cfg.llm.timeout_s <= 0:
        problems.append("must be > 0 @ config.llm.timeout_s")
    if cfg.llm.call_timeout_s <= 0:
        problems.append("must be > 0 @ config.llm.call_timeout_s")
    if not 0 <= cfg.llm.max_retries <= 20:  # a provider answering 429 forever must end the turn
        problems.append("must be between 0 and 20 @ config.llm.max_retries")
    if not 1 <= cfg.llm.max_concurrent_calls <= 10_000:
        problems.append("must be between 1 and 10000 @ config.llm.max_concurrent_calls")
    if cfg.limits.tool_result_max_chars < 200:
        problems.append("must be >= 200 @ config.limits.tool_result_max_chars")
    if cfg.limits.worker_timeout_s <= 0:
        problems.append("must be > 0 @ config.limits.worker_timeout_s")
    if cfg.limits.reviewer_timeout_s <= 0:
        problems.append("must be > 0 @ config.limits.reviewer_timeout_s")
    for key in ("max_concurrent_turns", "max_turns_per_user"):
        if getattr(cfg.limits, key) < 1:
            problems.append(f"must be >= 1 @ config.limits.{key}")
    if cfg.limits.max_queued_turns < 0:
        problems.append("must be >= 0 @ config.limits.max_queued_turns")
    if cfg.limits.history_max_chars < 2000:
        problems.append("must be >= 2000 @ config.limits.history_max_chars")
    if cfg.llm.context_tokens is not None and cfg.llm.context_tokens < 1000:
        problems.append("must be >= 1000 or null @ config.llm.context_tokens")
    days = cfg.retention.days
    if days is not None and not (math.isfinite(days) and 0 < days <= 36500):  # past 100 years: no date to cut at
        problems.append("must be a positive number of days (at most 36500) or null @ config.retention.days")
    names = set()
    for i, h in enumerate(cfg.hosts):
        if not h.name or h.name in names:
            problems.append(f"host names must be unique and non-empty @ config.hosts[{i}].name")
        names.add(h.name)
        if h.name != "local" and not h.address:
            problems.append(f"a remote host needs an address @ config.hosts[{i}].address")
    for key, folders in (("logs.dirs", cfg.logs.dirs), ("logs.journal_dirs", cfg.logs.journal_dirs)):
        for i, folder in enumerate(folders):
            if not folder.startswith("/") or "\0" in folder:
                problems.append(f"must be an absolute path @ config.{key}[{i}]")
    for key, url in (("loki.url", cfg.loki.url), ("tempo.url", cfg.tempo.url)):
        if url is not None and not url.startswith(("http://", "https://")):
            problems.append(f"must be an http:// or https:// URL @ config.{key}")
    if problems:
        where = f"{source}: " if source else ""
        raise ConfigError(where + "invalid configuration:\n  " + "\n  ".join(problems))


def parse_listen(listen: str) -> tuple[str, int]:
    """``"HOST:PORT"`` (IPv6 as ``[::1]:PORT``) → (host, port). Raises ConfigError."""
    host, sep, port = str(listen).rpartition(":")
    if not sep or not host:
        raise ConfigError(f"listen address must be HOST:PORT, got {listen!r}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        port_n = int(port)
    except ValueError:
        raise ConfigError(f"listen port must be a number, got {port!r}") from None
    if not 0 <= port_n <= 65535:
        raise ConfigError(f"listen port out of range: {port_n}")
    return host, port_n


def load_config(
    path: str | os.PathLike | None = None,
    *,
    overrides: Mapping[tuple[str, ...], Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Load the configuration.

    ``path``: the file (``--config``); ``None`` reads ``/etc/ongrid/ongrid.yaml``
    when present, else uses defaults.  ``overrides``: command-line flags as
    ``{("server", "listen"): "127.0.0.1:9000"}``.  ``environ``: defaults to
    ``os.environ``.  Raises ConfigError.
    """
    env = os.environ if environ is None else environ
    source = None
    data: Any = {}
    if path is not None:
        source = str(path)
        data = read_yaml_file(Path(path))
    else:
        for candidate in DEFAULT_CONFIG_PATHS:
            if Path(candidate).is_file():
                source = candidate
                data = read_yaml_file(Path(candidate))
                break
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: the top level must be an object (a mapping of keys), got {type_name(data)}")
    data = _plain(data)
    for var, keypath in ENV_OVERRIDES.items():
        if env.get(var):
            _set_path(data, keypath, env[var])
    for keypath, value in (overrides or {}).items():
        if value is not None:
            _set_path(data, keypath, value)
    return structure(data, source=source)


def read_secret(env_name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of the environment variable the config names, or None.

    Falls back to the value the daemon remembered when it removed the
    variable from its environment at start-up (only when ``environ`` is
    not given), so callers after start-up (a lazily built model client, a
    plugin) still get it."""
    from ongridd.secretset import REGISTRY

    env = os.environ if environ is None else environ
    value = env.get(env_name) if env_name else None
    if not value and env_name and environ is None:
        value = REGISTRY.remembered(env_name)
    return value or None


#: a bearer token's characters (RFC 6750 ``b64token``): what an ``Authorization`` header carries as is
_BEARER_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


def parse_tokens(raw: str | None, source: str = "ONGRID_TOKENS") -> dict[str, str]:
    """``"alice:token-of-alice,bob:token-of-bob"`` → ``{token: user}``.

    Raises ConfigError naming ``source`` (the variable it came from), the
    bad entry's position and user (never its value): not of the form
    ``user:token``, a token shorter than
    :data:`ongridd.secretset.MIN_SECRET_CHARS` characters, one with a
    character outside RFC 6750's ``b64token`` (spaces, invisible or
    non-ASCII characters), or one given to two users.
    """
    from ongridd.secretset import MIN_SECRET_CHARS, MIN_TOKEN_CHARS

    out: dict[str, str] = {}
    if not raw:
        return out
    for i, item in enumerate(raw.split(",")):
        item = item.strip()
        if not item:
            continue
        user, sep, token = item.partition(":")
        if not sep or not user.strip() or not token.strip():
            raise ConfigError(f"{source}: token entry #{i + 1} is not of the form user:token (the variable holds "
                              "comma-separated user:token pairs)")
        if len(token.strip()) < MIN_SECRET_CHARS:
            raise ConfigError(
                f"{source}: token entry #{i + 1} (user {user.strip()!r}) is {len(token.strip())} characters long; "
                f"a token needs at least {MIN_SECRET_CHARS} ({MIN_TOKEN_CHARS} or more random ones: python3 -c "
                "'import secrets; print(secrets.token_urlsafe(24))'): a short one is easy to guess, and every text "
                "that holds it is redacted")
        token, user = token.strip(), user.strip()
        if not _BEARER_TOKEN.fullmatch(token):
            raise ConfigError(f"{source}: token entry #{i + 1} (user {user!r}) holds a character a bearer token "
                              "cannot: use letters, digits and - . _ ~ + / (and = at the end)")
        if token in out:
            raise ConfigError(f"{source}: token entry #{i + 1} (user {user!r}) repeats the token of user "
                              f"{out[token]!r}: each user needs a token of their own")
        out[token] = user
    return out
