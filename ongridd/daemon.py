"""The daemon: one root Trio nursery (docs/architecture.md §4).

Start-up order: secrets read and removed from the environment (held for
redaction while the daemon runs, see :mod:`ongridd.secretset`) → state dir
check → database + migrations → recovery sweep → HTTP/websocket server
(``/healthz`` and ``/metrics`` answer at once; everything else waits) →
plugins and registries → runtime service nursery → ready (the waiting
requests run) → ``READY=1``.
SIGTERM/SIGINT: stop accepting, bounded drain of in-flight turns, every
open worker row closed ``killed`` ("daemon shutdown"), exit 0.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
from functools import partial
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import attrs
import trio

from ongridd.config import Config, parse_listen, parse_tokens, read_secret
from ongridd.errors import ConfigError, StoreError, leaf_exceptions
from ongridd.logs import get_logger, redact_url, take_held_back
from ongridd.oslimits import raise_open_files_limit
from ongridd.secretset import MIN_TOKEN_CHARS, DaemonSecrets, daemon_secrets
from ongridd.sdnotify import notify, watchdog_interval_s, watchdog_loop

log = get_logger(__name__)

DRAIN_GRACE_S = 4.0
#: at most this long for the bridges to post how their turns ended once the turns are drained (seconds)
BRIDGE_SETTLE_S = 5.0
HTTP_GRACEFUL_S = 1.0
#: an HTTP connection idle this long after its last answer is closed (seconds)
HTTP_KEEP_ALIVE_S = 30.0
#: after the HTTP server's own grace, how long a connection may still take to end at a stop
#: before its socket is closed (seconds)
STALLED_GRACE_S = 1.0


@attrs.define
class DaemonHandle:
    """Returned through ``task_status.started``: what tests and the demo need."""

    base_url: str
    services: Any
    shutdown: trio.Event
    stopped: trio.Event


def check_state_dir(path: Path) -> None:
    """Create the state dir if its parent allows (owner-only, 0700: it holds
    the conversations; an existing one keeps its mode); refuse a
    non-writable one.

    Raises ConfigError with the path and what to do.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the state dir {path}: {exc.strerror}; "
                          "pass --state-dir or set ONGRID_STATE_DIR to a writable folder") from None
    if not path.is_dir():
        raise ConfigError(f"the state dir {path} is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"the state dir {path} is not writable by this user; "
                          "fix its permissions or choose another with --state-dir")


def check_listen_free(host: str, port: int) -> None:
    """Fail early (before the database is touched) when the listen address
    cannot be bound.  Raises ConfigError naming the address."""
    import socket

    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; "
                          "choose another address with --listen or ONGRID_LISTEN") from None


def make_model(config: Config, api_key: str | None = None) -> Any:
    """The configured model client (an OpenAI-compatible provider).

    ``api_key``: the key read at start-up (default: :func:`read_secret` of
    ``llm.api_key_env``, which still finds it after start-up removed the
    variable from the environment)."""
    if not config.llm.base_url:
        from ongridd.llm.unconfigured import UnconfiguredModel

        return UnconfiguredModel()
    from ongridd.llm.openai_provider import OpenAIProvider

    if api_key is None:
        api_key = read_secret(config.llm.api_key_env)
    return OpenAIProvider(base_url=config.llm.base_url, api_key=api_key,
                          model=config.llm.model, timeout_s=config.llm.timeout_s,
                          call_timeout_s=config.llm.call_timeout_s,
                          max_retries=config.llm.max_retries, max_concurrent_calls=config.llm.max_concurrent_calls)


async def run_daemon(config: Config, *, handle_signals: bool = True, model: Any = None,
                     task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """See :func:`_run_daemon`.  With ``handle_signals``, SIGTERM/SIGINT are
    caught from the very start: one arriving before the server listens
    stops the daemon right after it listens, one arriving while plugins
    and registries load ends the start-up at once (exit 0 both), and a
    second one during the drain
    is logged and ignored, so the drain always closes its rows.  For the
    daemon's lifetime its secrets are out of ``os.environ`` and held for
    redaction (:func:`~ongridd.secretset.daemon_secrets`); they are put back
    when it returns."""
    with contextlib.ExitStack() as stack:
        if handle_signals:
            # trio re-raises, on leaving the receiver, signals it received but nobody read; a
            # second SIGTERM that came as the drain ended would then kill the stopped daemon
            # (exit -15).  Under SIG_IGN while the receiver is open, that re-raise is a no-op.
            stack.enter_context(_late_signals_ignored(signal.SIGTERM, signal.SIGINT))
        signals = (stack.enter_context(trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT))
                   if handle_signals else None)
        secrets, removed = stack.enter_context(daemon_secrets(config))
        if removed:
            log.info("secrets_removed_from_environment", variables=removed)
        await _run_daemon(config, model=model, signals=signals, secrets=secrets, task_status=task_status)


@contextlib.contextmanager
def _late_signals_ignored(*signums: int) -> Iterator[None]:
    """Ignore ``signums`` inside the block (the signal receiver opened in it
    takes them over meanwhile); put the previous handlers back on leaving."""
    saved = {s: signal.getsignal(s) for s in signums}
    for s in signums:
        signal.signal(s, signal.SIG_IGN)
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def warn_short_tokens(tokens: dict[str, str]) -> None:
    """One start-up warning per token shorter than MIN_TOKEN_CHARS, naming
    its user and length (never the token)."""
    for token, user in sorted(tokens.items(), key=lambda item: item[1]):
        if len(token) < MIN_TOKEN_CHARS:
            log.warning("short_token", user=user, length=len(token),
                        hint=f"use tokens of at least {MIN_TOKEN_CHARS} random characters "
                             "(e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(24))')")


def import_server() -> None:
    """Import what :func:`run_daemon` imports before it listens (the HTTP server
    and the app; the store and its SQLAlchemy come after, while ``/healthz``
    already answers): ``ongridd serve`` does it up front, with the collector
    off (see ``ongridd.cli.serve``); importing this module alone stays light."""
    import hypercorn.config  # noqa: F401
    import hypercorn.trio  # noqa: F401

    import ongridd.server.app  # noqa: F401


async def _run_daemon(config: Config, *, model: Any, signals: Any, secrets: DaemonSecrets,
                      task_status: Any) -> None:
    """Run the daemon until SIGTERM/SIGINT (or ``handle.shutdown`` is set).

    ``model``: a ModelClient to use instead of the configured provider
    (the demo and tests pass the scripted one's client); either way it is
    wrapped so held secrets are redacted from model traffic.  ``secrets``:
    what :func:`~ongridd.secretset.daemon_secrets` read at start-up.

    The HTTP server starts listening first: ``/healthz`` and ``/metrics``
    answer from then on, while the store is imported (in a worker thread),
    opened and migrated and its recovery sweep runs; every other request and
    the socket wait for ``services.ready``, set once the store is recovered
    and registries, plugins and the runtime are up (then ``daemon_ready`` is
    logged, ``READY=1`` sent and ``task_status.started`` called).  Raises
    ConfigError or StoreError when start-up cannot complete; nothing but
    those two routes has been served then.
    """
    from hypercorn.config import Config as HyperConfig
    from hypercorn.trio import serve as hypercorn_serve

    from ongridd.server.app import AppServices, serve_app
    from ongridd.server.auth import Authenticator
    from ongridd.server.connections import close_stalled_connections, harden_http_server
    from ongridd.server.directws import install as serve_chat_socket_directly
    from ongridd.server.ws import MAX_MESSAGE_BYTES, close_chat_sockets

    host, port = parse_listen(config.server.listen)
    admins = config.server.admins
    auth = Authenticator(parse_tokens(secrets.tokens_raw, config.server.tokens_env),
                         admins=None if admins is None else frozenset(admins))
    auth.check_listen(host, config.server.tokens_env)
    auth.check_admins()
    if admins is not None and auth.open_mode:
        log.warning("admins_without_tokens", admins=sorted(admins),
                    hint=f"server.admins is set but ${config.server.tokens_env} holds no tokens: every loopback "
                         "client is user local, who may change personas and plugins")
    warn_short_tokens(auth.tokens)
    check_state_dir(config.state_path)
    check_listen_free(host, port)
    if os.environ.get("ONGRID_LLM_API_KEY") and config.llm.api_key_env != "ONGRID_LLM_API_KEY":
        # the name a user may guess from ONGRID_LLM_BASE_URL / ONGRID_LLM_MODEL: say it is not read
        log.warning("api_key_variable_not_read", variable="ONGRID_LLM_API_KEY",
                    hint=f"the model's API key is read from ${config.llm.api_key_env} (llm.api_key_env); "
                         "ONGRID_LLM_API_KEY is neither sent to the model nor redacted as a secret")
    if model is None and not config.llm.base_url:
        log.warning("no_model_configured", hint="set llm.base_url or ONGRID_LLM_BASE_URL (llm.model / "
                    "ONGRID_LLM_MODEL too, unless the server's first listed model will do); chat turns will fail "
                    "until then")

    stopped = trio.Event()
    log.info("daemon_starting", listen=config.server.listen, state_dir=str(config.state_path),
             database=redact_url(config.database_url), config=config.source, open_files=raise_open_files_limit())
    store: Any = None
    try:
        # clients may connect from the start; all but /healthz and /metrics wait for ``ready``
        ready = trio.Event()
        services = AppServices(config=config, auth=auth, ready=ready,
                               no_model=model is None and not config.llm.base_url)
        app = serve_app(services)
        harden_http_server()  # before the first connection: one crafted packet must not end the daemon
        serve_chat_socket_directly()  # the chat socket's handshakes skip hypercorn's HTTP and ASGI layers
        hconf = HyperConfig()
        hconf.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
        hconf.graceful_timeout = HTTP_GRACEFUL_S
        hconf.accesslog = None
        hconf.errorlog = None
        hconf.keep_alive_timeout = HTTP_KEEP_ALIVE_S
        hconf.websocket_max_message_size = MAX_MESSAGE_BYTES  # read into memory before any check of ours

        shutdown = trio.Event()
        # the HTTP server stops only once the turns are drained and the chat clients told (1001): its
        # own stop closes every connection after HTTP_GRACEFUL_S, before a drained turn's last frames
        http_stop = trio.Event()
        try:
            async with trio.open_nursery() as root:
                binds = await root.start(partial(hypercorn_serve, app, hconf, shutdown_trigger=http_stop.wait))
                base_url = binds[0] if binds else f"http://{host}:{port}"
                log.info("daemon_listening", url=base_url)
                notify("STATUS=starting; /healthz answers on " + base_url)
                if signals is not None:  # from now on: a SIGTERM during start-up stops it too
                    root.start_soon(_signal_watch, signals, shutdown)
                try:
                    store = services.store = await _open_store(config)
                    await _run_services(config, model=model, secrets=secrets, store=store, services=services,
                                        signals=signals, shutdown=shutdown, base_url=base_url,
                                        on_ready=lambda: task_status.started(DaemonHandle(
                                            base_url=base_url, services=services, shutdown=shutdown,
                                            stopped=stopped)))
                finally:
                    # the turns are drained: tell the chat clients the daemon is stopping (1001), so
                    # they can tell a stop from a crash (bounded: a client that does not read gets none)
                    with trio.CancelScope(shield=True):
                        await close_chat_sockets()
                    http_stop.set()
                    # a client that stopped reading must not hold the stop: hypercorn's sends to it
                    # are shielded, so once the server's own grace is over its socket is closed
                    root.start_soon(close_stalled_connections, app, HTTP_GRACEFUL_S + STALLED_GRACE_S)
                root.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            failure = None if ready.is_set() else _sole_startup_failure(group)
            if failure is None:
                raise
            raise failure from None  # as before the server listened early: the error itself, not a group
    finally:
        if store is not None:
            with trio.move_on_after(5, shield=True):
                await store.aclose()
        stopped.set()
        if held := take_held_back():  # what throttled lines held back in their last window
            log.info("lines_not_logged", **held)
        log.info("daemon_stopped")


async def _open_store(config: Config) -> Any:
    """The store, imported (in a worker thread: SQLAlchemy's import takes a few hundred
    milliseconds, and ``/healthz`` answers meanwhile), opened (schema migrated) and
    recovered (its own ``recovery_sweep`` line); StoreError when it cannot be.  Cancellation
    during the open leaves nothing open (``Store.open`` closes what it opened)."""
    await trio.to_thread.run_sync(importlib.import_module, "ongridd.store")
    from ongridd.store import Store

    store = await Store.open(config.database_url, pool_size=config.database.pool_size)
    try:
        await store.recovery_sweep()  # logs its own ``recovery_sweep`` line with the counts
    except BaseException:
        with trio.move_on_after(5, shield=True):
            await store.aclose()
        raise
    return store


async def _run_services(config: Config, *, model: Any, secrets: DaemonSecrets, store: Any, services: Any,
                        signals: Any, shutdown: trio.Event, base_url: str, on_ready: Any) -> None:
    """Build the registries and run the runtime and the plugins' services
    until ``shutdown``; then drain the turns in flight and return.

    Fills ``services`` (runtime, agents API, marketplace, plugin routes) and
    sets ``services.ready`` once all is up, then logs ``daemon_ready``,
    sends ``READY=1`` and calls ``on_ready()``.  Raises what start-up raises
    (ConfigError, StoreError, ...), with ``ready`` left unset.
    """
    # the server already answers /healthz on this (Trio) thread: import in a worker thread; a stop
    # asked for meanwhile (SIGTERM) ends the start-up at once, a hung plugin import included
    finished, client = await _unless_stopped(shutdown, partial(trio.to_thread.run_sync, _prepare_services,
                                                               abandon_on_cancel=True))
    if not finished:
        log.info("daemon_stopped_during_startup")
        return
    from ongridd.plugins.build import RegistryBuilder
    from ongridd.runtime.core import Runtime
    from ongridd.runtime.ports import RuntimeStore, RuntimeWriter
    from ongridd.runtime.registries import RegistryHolder
    from ongridd.store.writer import StoreWriter

    async with client as http:
        from ongridd.plugins.chat import ChatAPI

        chat = ChatAPI(store=store)
        builder = RegistryBuilder(config=config, store=store, http=http, chat=chat)
        finished, registries = await _unless_stopped(shutdown, partial(builder.build, abandon_on_cancel=True))
        if not finished:
            log.info("daemon_stopped_during_startup")
            return
        holder = RegistryHolder(registries)
        from ongridd.llm.redacting import RedactingModel

        client = RedactingModel(model if model is not None else partial(make_model, config, secrets.api_key),
                                known_agents=lambda: holder.current.agents.snapshot())
        # typed seams: the type checker holds the Store to the runtime's store and writer protocols
        runtime_store: RuntimeStore = store
        writer: RuntimeWriter = StoreWriter(store)
        runtime = Runtime(config, runtime_store, holder, client, writer=writer)
        from ongridd.marketplace.service import AgentsAPI, MarketplaceService

        async with trio.open_nursery() as nursery:
            await nursery.start(runtime.run)
            chat.bind(runtime, nursery)
            start_plugin_services(nursery, registries.services)
            agents_api = AgentsAPI(config=config, holder=holder, builder=builder, store=store)
            services.runtime = runtime
            services.plugin_routes = lambda: holder.current.routes
            services.plugin_report = lambda: holder.current.plugins
            services.agents_api = agents_api
            services.marketplace = MarketplaceService(config=config, holder=holder, builder=builder, store=store)
            _make_agents_dir(config.state_agents_dir)
            nursery.start_soon(agents_api.watch)
            if config.retention.days is not None:
                from ongridd.store.retention import retention_loop

                nursery.start_soon(partial(retention_loop, store, config.retention.days,
                                           busy=lambda: runtime.turns.keys(),
                                           removed=lambda _report: runtime.forget_cached_threads()))
            services.ready.set()
            log.info("daemon_ready", url=base_url)
            notify("READY=1\nSTATUS=serving on " + base_url)
            interval = watchdog_interval_s()
            if interval:
                nursery.start_soon(watchdog_loop, interval)
            on_ready()
            tune_gc()
            await shutdown.wait()
            log.info("daemon_stopping")
            notify("STOPPING=1")
            await runtime.drain(DRAIN_GRACE_S)
            # the bridges' relays tell their chats how the drained turns ended (a placeholder left at
            # "running" would stay so): bounded, a platform that does not answer holds the stop no longer
            left = await chat.settle(BRIDGE_SETTLE_S)
            if left:
                log.warning("bridge_tasks_cancelled_at_shutdown", count=left)
            nursery.cancel_scope.cancel()


#: the cyclic garbage collector's thresholds once the daemon is up (Python's defaults: 700, 10, 10)
GC_THRESHOLDS = (50_000, 20, 20)


def tune_gc() -> None:
    """Once start-up is done: collect, then freeze what is alive (modules,
    registries, the runtime: objects that live as long as the daemon) so
    later collections never walk them again, and make young collections
    rarer.  Under load (1,000 sessions) the default settings had the
    collector walk the whole heap again and again: seconds per thousand
    turns, in pauses that every session waited out.  What ``ongridd serve``
    froze before start-up (its imports, some 3,000 of them garbage) is
    unfrozen first, so that garbage is freed here."""
    import gc

    gc.unfreeze()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


async def _unless_stopped(shutdown: trio.Event, fn: Any, *args: Any) -> tuple[bool, Any]:
    """``await fn(*args)`` unless ``shutdown`` is set first (then it is
    cancelled): ``(True, its result)`` when it ran to its end, else
    ``(False, None)``.  Its exceptions propagate."""
    if shutdown.is_set():
        return False, None
    finished, result = False, None
    async with trio.open_nursery() as nursery:
        async def stop() -> None:
            await shutdown.wait()
            nursery.cancel_scope.cancel()

        nursery.start_soon(stop)
        result = await fn(*args)
        finished = True
        nursery.cancel_scope.cancel()
    return finished, result


def _prepare_services() -> Any:
    """Import what :func:`_run_services` needs and build the plugins' HTTP
    client (an ``httpx2.AsyncClient``, not yet entered; building it loads
    the CA bundle, some 20-30 ms).  Run in a worker thread, so the Trio
    thread keeps answering ``/healthz`` meanwhile; the imports there are
    then look-ups.  An ImportError surfaces in the caller."""
    import httpx2

    import ongridd.llm.redacting  # noqa: F401
    import ongridd.marketplace.service  # noqa: F401
    import ongridd.plugins.build  # noqa: F401
    import ongridd.plugins.chat  # noqa: F401
    import ongridd.runtime.core  # noqa: F401
    import ongridd.runtime.ports  # noqa: F401
    import ongridd.runtime.registries  # noqa: F401
    import ongridd.store.writer  # noqa: F401

    return httpx2.AsyncClient(timeout=30.0)


def _sole_startup_failure(group: BaseExceptionGroup) -> Exception | None:
    """The one error (not a cancellation) inside ``group``, else None."""
    leaves = [exc for exc in leaf_exceptions(group) if not isinstance(exc, trio.Cancelled)]
    return leaves[0] if len(leaves) == 1 and isinstance(leaves[0], Exception) else None


def start_plugin_services(nursery: trio.Nursery, plugin_services: Any) -> None:
    """Start each plugin service (``PluginService``) in ``nursery``; one that
    raises is logged (``plugin_service_failed``) and the daemon stays up.
    Cancelled with the nursery at shutdown."""

    async def run(svc: Any) -> None:
        log.info("plugin_service_started", plugin=svc.plugin, service=svc.name)
        try:
            await svc.fn()
        except Exception:
            log.exception("plugin_service_failed", plugin=svc.plugin, service=svc.name)

    for svc in plugin_services:
        nursery.start_soon(run, svc, name=f"{svc.plugin}:{svc.name}")


def _make_agents_dir(path: Path) -> None:
    """Create the state dir's agents folder (where API-written personas go when no user dir
    is configured) so the persona watcher can watch it for events instead of polling for it
    to appear.  A failure is logged; the watcher then polls."""
    try:
        path.mkdir(exist_ok=True)
    except OSError as exc:
        log.warning("agents_dir_not_created", path=str(path), error=exc.strerror or str(exc))


async def _signal_watch(signals: Any, shutdown: trio.Event) -> None:
    """First SIGTERM/SIGINT: start the graceful stop.  Later ones: logged
    and ignored (the drain is bounded; killing it would leave rows open)."""
    async for signum in signals:
        name = signal.Signals(signum).name
        if shutdown.is_set():
            log.warning("signal_ignored", signal=name, reason="already stopping; the drain is bounded")
            continue
        log.info("signal_received", signal=name)
        shutdown.set()


__all__ = ["run_daemon", "check_state_dir", "DaemonHandle", "StoreError"]
