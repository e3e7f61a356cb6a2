"""The quart-trio application: HTTP API, plugin routes and the console; the
chat socket (``/ws``) is answered in front of it (:func:`serve_app`).

Built by :func:`create_app` from an :class:`AppServices` bundle; the server
talks to the runtime only through the small API the bundle exposes (start
turn, subscribe, stop), never the other way round.

Start-up: the daemon serves this app as soon as the store is open and
recovered, before the registries and the runtime exist.  Until
``AppServices.ready`` is set only ``/healthz``, ``/metrics`` and the console's
files are answered at once; every other request waits for it (at most
``AppServices.startup_wait_s``), then runs, or answers 503
``{"error": "the daemon is still starting"}``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from quart import Response, request
from quart_trio import QuartTrio
from quart_trio.wrappers import TrioRequest
from werkzeug.exceptions import HTTPException

from ongridd import jsontext
from ongridd.errors import AuthError, Forbidden, NotFound, OngridError, PersonaError, TaskStateError
from ongridd.logs import Throttle, get_logger
from ongridd.plugins import daemon_path
from ongridd.secretset import redact
from ongridd.server.auth import Authenticator, bearer_token, origin_problem
from ongridd.server.connections import peer_text
from ongridd.server.webpage import CONSOLE_HEADERS, console_asset
from ongridd.unicodetext import valid_text

if TYPE_CHECKING:  # the types only (the daemon wires the instances in)
    from ongridd.config import Config
    from ongridd.marketplace.service import AgentsAPI, MarketplaceService
    from ongridd.runtime.core import Runtime
    from ongridd.runtime.ports import RuntimeStore

log = get_logger(__name__)

#: a refused token (401) is logged — who, what path, why; never the token — at most once a second:
#: any sender can cause one, and a guessing client would otherwise write a line per guess
UNAUTHORIZED = Throttle(1.0, "request_unauthorized")
#: characters of a refused request's path that its log line keeps (the sender chose it)
LOGGED_PATH_MAX = 200

#: body limit of a plugin route with ``auth="none"`` (platform webhooks; bytes)
PLUGIN_OPEN_BODY_MAX = 1024 * 1024
#: body limit of a request that carries no valid token (bytes; it is answered 401 whatever its body,
#: and the server reads a body as it arrives, before any route runs) and of an authenticated one
ANONYMOUS_BODY_MAX = 64 * 1024
BODY_MAX = 4 * 1024 * 1024
#: the time a body may take to arrive: a request without a valid token, and any other (seconds;
#: then 408)
ANONYMOUS_BODY_TIMEOUT_S = 10
BODY_TIMEOUT_S = 60

#: how long a request (or a socket) that arrives during start-up waits for the daemon to be ready (seconds)
STARTUP_WAIT_S = 30.0

#: answered before the daemon is ready: liveness, metrics, the console's files (they need no registry)
_SERVED_DURING_STARTUP = ("/healthz", "/readyz", "/metrics", "/")


@attrs.define(kw_only=True)
class AppServices:
    """What the server needs.  ``runtime``: the multi-agent runtime (chat
    socket, sessions).  ``store``: the Store.  ``agents_api``: persona
    listing/editing.  ``marketplace``: install/uninstall.  ``plugin_routes``:
    a callable returning the current ``{(METHOD, path): handler}`` table.
    ``plugin_report``: a callable returning the current registries' plugin
    load reports (:class:`~ongridd.plugins.discovery.PluginReport`).
    ``ready``: set by the daemon once registries, plugins and runtime are up
    (the fields above are filled in by then); None means ready from the
    start.  ``startup_wait_s``: how long a request or socket that arrives
    before ``ready`` waits for it (seconds).  ``no_model``: no model is
    configured (every chat turn fails until one is; ``/readyz`` says so)."""

    config: Config
    auth: Authenticator
    store: RuntimeStore | None = None
    runtime: Runtime | None = None
    agents_api: AgentsAPI | None = None
    marketplace: MarketplaceService | None = None
    plugin_routes: Callable[[], Mapping[tuple[str, str], Any]] | None = None
    plugin_report: Callable[[], Sequence[Any]] | None = None
    ready: trio.Event | None = None
    startup_wait_s: float = STARTUP_WAIT_S
    no_model: bool = False

    async def wait_ready(self) -> bool:
        """Wait until the daemon is ready, at most ``startup_wait_s``.

        Returns True when it is ready (at once when ``ready`` is None or
        set), False when the wait ran out.  Cancelled with the caller."""
        if self.ready is None or self.ready.is_set():
            return True
        with trio.move_on_after(self.startup_wait_s):
            await self.ready.wait()
        return self.ready.is_set()


#: what ``/readyz`` says when no model is configured
NO_MODEL_HINT = ("no model is configured: every chat turn fails until llm.base_url (or ONGRID_LLM_BASE_URL) is set; "
                 "the console, the API and the bridges are served")


def _json(body: Any, status: int = 200) -> Response:
    """``body`` as a JSON response; an unpaired surrogate in it (a request's ``"\\ud800"``
    echoed back, say) is written as U+FFFD, so the answer is always UTF-8."""
    return Response(valid_text(jsontext.dumps(body, ensure_ascii=False, default=str)), status=status,
                    content_type="application/json; charset=utf-8")


#: error codes of the framework's HTTP errors (others: the status's name in snake case)
_HTTP_ERROR_CODES = {400: "bad_request", 404: "not_found", 405: "method_not_allowed", 413: "too_large"}


def _error(status: int, code: str, message: str) -> Response:
    return _json({"error": {"code": code, "message": message}}, status)


async def _body_json() -> Any:
    """The request body as JSON (see :func:`parse_body`)."""
    return parse_body(await request.get_data())


def parse_body(raw: str | bytes) -> Any:
    """``raw`` as JSON, or None when it is empty or not JSON (invalid UTF-8 or JSON, absurd
    nesting): callers answer 400 then, or (a plugin's route) read ``raw`` their own way.
    Raises OngridError (400) for JSON that holds a number JSON does not have (``NaN``,
    ``Infinity``, ``1e999``), naming it: Python would read it, then write JSON no browser
    or PostgreSQL reads."""
    try:
        return jsontext.loads_or_none(raw)
    except jsontext.NonFiniteNumber as exc:
        raise OngridError(f"request body: {exc}") from None


#: a decimal integer as a query parameter carries it (ASCII digits: ``str.isdigit`` also takes "²")
_DECIMAL = re.compile(r"\s*-?[0-9]{1,11}\s*")


def query_int(name: str, default: int, low: int, high: int) -> int:
    """The integer query parameter ``name`` clamped to ``[low, high]`` (``default``
    when absent); OngridError (400) when it is not a decimal integer."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    if not _DECIMAL.fullmatch(raw):
        raise OngridError(f"{name}: expected an integer, got {raw[:20]!r}")
    return max(low, min(high, int(raw)))


def console_response(name: str) -> Response:
    """One console asset with its type and the page's security headers; 404 for any other name."""
    found = console_asset(name)
    if found is None:
        return _error(404, "not_found", f"no console asset {name[:80]!r}")
    body, content_type = found
    resp = Response(body, content_type=content_type)
    for key, value in CONSOLE_HEADERS.items():
        resp.headers[key] = value
    return resp


def _client_host(scope: Mapping[str, Any]) -> str | None:
    client = scope.get("client")
    return client[0] if client else None


def create_app(services: AppServices) -> QuartTrio:
    """Build the app.  Routes are the contract of docs/architecture.md §15.4."""
    app = QuartTrio("ongridd")
    app.config["MAX_CONTENT_LENGTH"] = BODY_MAX
    app.config["BODY_TIMEOUT"] = BODY_TIMEOUT_S
    app.config["RESPONSE_TIMEOUT"] = 300
    app.request_class = _bounded_request_class(app.request_class, services)
    app.ongrid = services  # type: ignore[attr-defined]

    def current_user() -> str:
        return _request_user(services, request.headers, request.scope)

    _add_startup_gate(app, services)  # first: the other checks need the registries
    _add_origin_checks(app, services)

    @app.before_request
    async def _options_need_a_token():
        # the framework answers OPTIONS itself with the methods of the route a path matches: to a client
        # without a valid token that would tell routes apart (no cross-origin client is served anyway)
        if request.method == "OPTIONS":
            current_user()

    _add_error_handlers(app, current_user)

    @app.get("/healthz")
    async def healthz():
        return _json({"status": "ok"})

    @app.get("/readyz")
    async def readyz():
        # readiness (a load balancer's or a script's "can it take turns now?"), answered at once
        if services.ready is None or services.ready.is_set():
            if services.no_model:  # up, serving everything but turns: a configuration to fix, not a wait
                return _json({"status": "ready", "model": "none", "hint": NO_MODEL_HINT})
            return _json({"status": "ready"})
        return _json({"status": "starting"}, 503)

    @app.get("/metrics")
    async def metrics():
        # with tokens configured the metrics (user-derived labels, activity)
        # need a token too, unless the operator opened them explicitly
        if not services.auth.open_mode and not getattr(services.config.server, "metrics_public", False):
            current_user()
        return Response(generate_latest(), content_type=CONTENT_TYPE_LATEST)

    _add_agent_routes(app, services, current_user)
    _add_session_routes(app, services, current_user)
    _add_marketplace_routes(app, services, current_user)

    @app.get("/api/plugins")
    async def plugins_list():
        # what this daemon loaded: its configuration and its environment's secrets decide a bridge
        current_user()
        reports = services.plugin_report() if services.plugin_report else ()
        return _json({"plugins": [r.to_json() for r in reports]})

    _add_plugin_routes(app, services, current_user)

    @app.get("/")
    async def index():
        return console_response("index.html")

    @app.get("/static/<name>")
    async def static_asset(name: str):
        return console_response(name)

    return app


def serve_app(services: AppServices) -> Any:
    """The ASGI application the daemon serves: :func:`create_app`'s routes, with
    the chat socket (``/ws``) answered in front of them by
    :class:`~ongridd.server.ws.ChatSocketFront`."""
    from ongridd.server.ws import ChatSocketFront

    return ChatSocketFront(create_app(services), services)


def _request_user(services: AppServices, headers: Any, scope: Mapping[str, Any]) -> str:
    """The user a request's ``Authorization`` header and client address authenticate; AuthError
    (a header of another scheme than ``Bearer``, where a token is needed, is named as such)."""
    header = headers.get("Authorization") if headers else None
    token = bearer_token(header)
    if token is None and header and not services.auth.open_mode:
        raise AuthError("the Authorization header is not 'Bearer TOKEN'")
    return services.auth.authenticate(token, _client_host(scope))


def _bounded_request_class(base: type[TrioRequest], services: AppServices) -> type[TrioRequest]:
    """``base`` (the framework's request class) with a body limit and time limit chosen per request,
    before a byte of the body is read: the framework buffers every body as it arrives, before
    routing, so without this any client could make each of its connections hold
    ``MAX_CONTENT_LENGTH`` for ``BODY_TIMEOUT``.  A request to an open plugin route (a
    platform webhook, checked by its own signature, whoever sends it: behind a reverse proxy
    every sender is a loopback client) gets :data:`PLUGIN_OPEN_BODY_MAX` /
    :data:`ANONYMOUS_BODY_TIMEOUT_S`; an authenticated one (loopback mode: every loopback one)
    :data:`BODY_MAX` / :data:`BODY_TIMEOUT_S`; any other :data:`ANONYMOUS_BODY_MAX` /
    :data:`ANONYMOUS_BODY_TIMEOUT_S`.  Over the limit → 413, too slow → 408."""

    class BoundedRequest(base):  # type: ignore[valid-type, misc]
        def __init__(self, method: str, scheme: str, path: str, *args: Any, **kwargs: Any) -> None:
            limit, timeout = ANONYMOUS_BODY_MAX, ANONYMOUS_BODY_TIMEOUT_S
            try:
                route = _plugin_route_of(services, method, path)
            except Exception:  # noqa: BLE001 - no registry yet: no open route
                route = None
            if route is not None and getattr(route, "auth", "token") == "none":
                limit = PLUGIN_OPEN_BODY_MAX
            else:
                try:
                    _request_user(services, args[1] if len(args) > 1 else kwargs.get("headers"),
                                  kwargs.get("scope") or {})
                    limit, timeout = BODY_MAX, BODY_TIMEOUT_S
                except AuthError:
                    pass
            kwargs["max_content_length"], kwargs["body_timeout"] = limit, timeout
            super().__init__(method, scheme, path, *args, **kwargs)

    return BoundedRequest


def _plugin_route_of(services: AppServices, method: str, path: str) -> Any:
    """The plugin route registered for ``(method, path)``, or None — also None for a path the
    daemon serves itself (:func:`~ongridd.plugins.daemon_path`), whatever a plugin
    registered there: such a route never runs and lends the daemon's route none of an open
    route's exemptions (the origin check, the larger anonymous body)."""
    table = services.plugin_routes() if services.plugin_routes else {}
    route = table.get((method, path))
    return None if route is None or daemon_path(path) else route


_ROUTE_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")


def _methods_of(app: QuartTrio, services: AppServices, path: str) -> list[str]:
    """The methods some route other than the plugin catch-all — the daemon's
    own or a plugin's — takes at ``path`` (for a 405's ``Allow``)."""
    from werkzeug.exceptions import HTTPException as WerkzeugHTTPException

    adapter = app.url_map.bind("localhost")
    out = []
    for method in _ROUTE_METHODS:
        if _plugin_route_of(services, method, path) is not None:
            out.append(method)
            continue
        try:
            rule, _ = adapter.match(path, method=method, return_rule=True)
        except WerkzeugHTTPException:  # no such route, another method only, or a redirect
            continue
        if rule.endpoint != "plugin_route":
            out.append(method)
    return out


def _add_startup_gate(app: QuartTrio, services: AppServices) -> None:
    """Hold requests that need the registries or the runtime until the daemon
    is ready; 503 ``{"error": "the daemon is still starting"}`` (with
    ``Retry-After``) when ``startup_wait_s`` runs out first.  The socket waits
    in its own handler (:func:`~ongridd.server.ws.serve_chat_socket`)."""

    @app.before_request
    async def _wait_until_ready():
        path = request.path
        if path in _SERVED_DURING_STARTUP or path.startswith("/static/"):
            return None
        if await services.wait_ready():
            return None
        resp = _json({"error": "the daemon is still starting"}, 503)
        resp.headers["Retry-After"] = "1"
        return resp


def _add_origin_checks(app: QuartTrio, services: AppServices) -> None:
    """Refuse cross-site and DNS-rebinding requests (403) before any route runs (the chat
    socket checks its own handshake: :class:`~ongridd.server.ws.ChatSocketFront`)."""

    @app.before_request
    async def _check_origin():
        route = _plugin_route_of(services, request.method, request.path)
        if route is not None and getattr(route, "auth", "token") == "none":
            return None  # a platform webhook: the handler verifies the caller itself
        problem = origin_problem(request.headers.getlist("Host"), request.headers.getlist("Origin"),
                                 open_mode=services.auth.open_mode)
        if problem:
            return _error(403, "forbidden", problem)
        return None


def _logged_path(path: str) -> str:
    """``path`` as a log line keeps it: redacted whole first, then cut to LOGGED_PATH_MAX
    characters (a secret cut in two would pass the log's own redaction in pieces)."""
    return path if len(path) <= LOGGED_PATH_MAX else redact(path)[:LOGGED_PATH_MAX] + "…"


def _add_error_handlers(app: QuartTrio, current_user: Callable[[], str]) -> None:
    """Map the project's errors, and the framework's own (404, 405, 413, ...), to JSON error answers
    (a framework 404 or 405 to a client ``current_user`` refuses is that refusal, a 401)."""

    @app.errorhandler(AuthError)
    async def _auth_error(exc: AuthError):
        # throttled per reason (a fixed text): a stream without a token cannot hide guesses of one
        if (fields := UNAUTHORIZED.fields(str(exc), peer=peer_text(request.scope.get("client")),
                                          method=request.method, path=_logged_path(request.path),
                                          reason=str(exc))) is not None:
            log.warning("request_unauthorized", **fields)
        return _error(401, "unauthorized", str(exc))

    @app.errorhandler(Forbidden)
    async def _forbidden(exc: Forbidden):
        return _error(403, "forbidden", str(exc))

    @app.errorhandler(NotFound)
    async def _not_found(exc: NotFound):
        return _error(404, "not_found", str(exc))

    @app.errorhandler(TaskStateError)
    async def _conflict(exc: TaskStateError):
        return _error(409, "conflict", str(exc))

    @app.errorhandler(OngridError)
    async def _bad(exc: OngridError):
        return _error(400, "bad_request", str(exc))

    @app.errorhandler(HTTPException)
    async def _http_error(exc: HTTPException):
        # the framework's own refusals (no such route, a method a route does not take, a body
        # over the size limit) answer in the same JSON shape as every other error
        status = exc.code or 500
        if status in (404, 405):
            # no route (one the catch-all does not take either, such as a path with a line break) or
            # not this method: a client without a valid token learns neither, as for every other path
            try:
                current_user()
            except AuthError as refused:
                return await _auth_error(refused)
        code = _HTTP_ERROR_CODES.get(status) or "_".join((exc.name or "error").lower().split())
        resp = _error(status, code, exc.description or exc.name or "error")
        for name, value in exc.get_headers():
            if name.lower() != "content-type":
                resp.headers[name] = value  # Allow on a 405, for one
        if status == 413:  # the body was left unread: the connection cannot carry another request
            resp.headers["Connection"] = "close"
        return resp

    @app.errorhandler(PersonaError)
    async def _bad_persona(exc: PersonaError):
        # {error, warnings}: 413 for a body over the persona size limit, else 400
        status, code = (413, "too_large") if exc.too_large else (400, "bad_request")
        resp = _json({"error": {"code": code, "message": str(exc)}, "warnings": list(exc.warnings)}, status)
        if exc.too_large:  # the body may be left unread: the connection cannot carry another request
            resp.headers["Connection"] = "close"
        return resp


def _add_agent_routes(app: QuartTrio, services: AppServices, current_user: Callable[[], str]) -> None:
    """``/api/agents``: list, read, write and delete personas (§15.4)."""

    @app.get("/api/agents")
    async def agents_list():
        current_user()
        return _json(services.agents_api.list())

    @app.get("/api/agents-skipped")
    async def agents_skipped():
        current_user()
        return _json(services.agents_api.skipped())

    @app.get("/api/agents/<name>")
    async def agents_get(name: str):
        current_user()
        return _json(await services.agents_api.get(name))

    @app.put("/api/agents/<name>")
    async def agents_put(name: str):
        user = current_user()
        services.auth.require_admin(user, "changing a persona")
        limit = services.agents_api.max_body_bytes
        if (request.content_length or 0) > limit:  # refused unread
            raise PersonaError(f"persona too large: {request.content_length:,} bytes; a persona file may have "
                               f"at most {limit:,}", too_large=True)
        body = await request.get_data()  # bytes: the parser reports invalid UTF-8 itself
        return _json(await services.agents_api.put(name, body, actor=user))

    @app.delete("/api/agents/<name>")
    async def agents_delete(name: str):
        user = current_user()
        services.auth.require_admin(user, "deleting a persona")
        return _json(await services.agents_api.delete(name, actor=user))


def _add_session_routes(app: QuartTrio, services: AppServices, current_user: Callable[[], str]) -> None:
    """``/api/me`` and ``/api/sessions``: who am I, threads, messages, tree, export, audit (§15.4)."""

    # ---- who am I (the console asks before it signs in) ----------------
    @app.get("/api/me")
    async def me():
        # no credentials presented: say whether a token is needed instead of 401
        if services.auth.open_mode or request.headers.get("Authorization"):
            return _json({"user": current_user(), "auth_required": not services.auth.open_mode})
        return _json({"user": None, "auth_required": True})

    # ---- sessions -------------------------------------------------------
    @app.get("/api/sessions")
    async def sessions_list():
        from ongridd.runtime.core import THREADS_PAGE_MAX  # imported once the daemon is up

        user = current_user()
        limit = query_int("limit", 50, 1, THREADS_PAGE_MAX)
        before = None
        if request.args.get("before"):
            try:
                from ongridd.store.rows import parse_time  # (the store is imported by then: not at start-up)

                before = parse_time(request.args["before"][:64], "before")
            except ValueError as exc:
                raise OngridError(str(exc)) from None
        before_id = request.args.get("before_id") or None
        if before_id is not None and len(before_id) > 64:
            raise OngridError("before_id: expected a session id")
        return _json(await services.runtime.list_threads(user_id=user, limit=limit, before=before,
                                                         before_id=before_id))

    @app.get("/api/sessions/<session_id>/messages")
    async def session_messages(session_id: str):
        from ongridd.runtime.core import MESSAGES_PAGE_MAX

        user = current_user()
        return _json(await services.runtime.session_messages(
            session_id, user_id=user, after_seq=query_int("after_seq", 0, 0, 2**31 - 1),
            limit=query_int("limit", 500, 1, MESSAGES_PAGE_MAX)))

    @app.get("/api/sessions/<session_id>/tree")
    async def session_tree(session_id: str):
        user = current_user()
        return _json(await services.runtime.session_tree(session_id, user_id=user))

    @app.get("/api/sessions/<session_id>/export")
    async def session_export(session_id: str):
        user = current_user()
        return _json(await services.runtime.session_export(session_id, user_id=user))

    @app.get("/api/sessions/<session_id>/origins")
    async def session_origins(session_id: str):
        user = current_user()
        return _json(await services.runtime.session_origins(session_id, user_id=user))

    @app.get("/api/sessions/<session_id>/audit")
    async def session_audit(session_id: str):
        from ongridd.runtime.core import AUDIT_PAGE_MAX

        user = current_user()
        return _json(await services.runtime.session_audit(
            session_id, user_id=user, limit=query_int("limit", AUDIT_PAGE_MAX, 1, AUDIT_PAGE_MAX),
            offset=query_int("offset", 0, 0, 2**31 - 1)))


def _add_marketplace_routes(app: QuartTrio, services: AppServices, current_user: Callable[[], str]) -> None:
    """``/api/marketplace``: list, install, uninstall (§14)."""

    @app.get("/api/marketplace")
    async def marketplace_list():
        current_user()
        return _json(await services.marketplace.list())

    @app.post("/api/marketplace/<action>")
    async def marketplace_action(action: str):
        user = current_user()
        if action not in ("install", "uninstall"):
            return _error(404, "not_found", f"no marketplace action {action!r}")
        services.auth.require_admin(user, f"{action}ing a plugin")
        body = await _body_json()
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            return _error(400, "bad_request", 'body must be {"name": "<plugin name>"}')
        fn = services.marketplace.install if action == "install" else services.marketplace.uninstall
        return _json(await fn(body["name"], actor=user))


def _add_plugin_routes(app: QuartTrio, services: AppServices, current_user: Callable[[], str]) -> None:
    """The catch-all route that dispatches to plugin routes (looked up per request: the table is swappable)."""

    @app.route("/<path:path>", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
    async def plugin_route(path: str):
        route = _plugin_route_of(services, request.method, "/" + path)
        if route is None:
            current_user()  # 401 without a valid token: an anonymous client learns no route's name
            allowed = _methods_of(app, services, "/" + path)
            if not allowed:
                return _error(404, "not_found", f"no route {request.method} /{path}")
            resp = _error(405, "method_not_allowed", f"/{path} does not take {request.method}; it takes "
                                                     f"{', '.join(allowed)}")
            resp.headers["Allow"] = ", ".join(allowed)
            return resp
        from ongridd.plugins.api import PluginRequest, PluginResponse

        open_route = getattr(route, "auth", "token") == "none"
        handler = getattr(route, "handler", route)
        if open_route:
            if (request.content_length or 0) > PLUGIN_OPEN_BODY_MAX:
                return _error(413, "too_large", f"body over {PLUGIN_OPEN_BODY_MAX:,} bytes")
            user = ""
            raw = await request.get_data()
            if len(raw) > PLUGIN_OPEN_BODY_MAX:  # chunked bodies carry no length up front
                return _error(413, "too_large", f"body over {PLUGIN_OPEN_BODY_MAX:,} bytes")
            # such a route verifies its sender from the raw body (a signature, a secret header) before
            # it reads the JSON: parsed then, on first read of request.json, so an unverified body costs
            # no parse, and one holding NaN gets the route's 401, never a 400 naming what it holds
            # (a verified one reads as None)
            extra: dict[str, Any] = {}
        else:
            user = current_user()
            raw = await request.get_data()
            extra = {"json": parse_body(raw)}
        # werkzeug's Headers is a case-insensitive str → str mapping (not a registered Mapping);
        # get_data() without as_text returns bytes
        preq = PluginRequest(method=request.method, path="/" + path,
                             headers=request.headers,  # type: ignore[arg-type]
                             query=dict(request.args), user=user,
                             body=raw, **extra)  # type: ignore[arg-type]
        try:
            resp = await handler(preq)
        except OngridError as exc:
            return _error(400, "bad_request", str(exc))
        except Exception:
            log.exception("plugin_route_failed", path="/" + path)
            return _error(500, "internal", "the plugin route failed; see the daemon log")
        if isinstance(resp, PluginResponse):
            if isinstance(resp.body, (str, bytes)):
                return Response(resp.body, status=resp.status,
                                content_type=resp.content_type or "text/plain; charset=utf-8")
            return _json(resp.body, resp.status)
        return _json(resp)
