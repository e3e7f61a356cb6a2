"""The quart-trio application: HTTP API, plugin routes and the chat socket.

Built by :func:`create_app` from an :class:`AppServices` bundle; the server
talks to the runtime only through the small API the bundle exposes (start
turn, subscribe, stop), never the other way round.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from urllib.parse import urlsplit

from quart import Response, abort, request, websocket
from quart_trio import QuartTrio

from ongridd.errors import AuthError, NotFound, OngridError, TaskStateError
from ongridd.logs import get_logger
from ongridd.server.auth import Authenticator, bearer_token, is_loopback

log = get_logger(__name__)


@attrs.define(kw_only=True)
class AppServices:
    """What the server needs.  ``runtime``: the multi-agent runtime (chat
    socket, sessions).  ``store``: the Store.  ``agents_api``: persona
    listing/editing.  ``marketplace``: install/uninstall.  ``plugin_routes``:
    a callable returning the current ``{(METHOD, path): handler}`` table."""

    config: Any
    auth: Authenticator
    store: Any = None
    runtime: Any = None
    agents_api: Any = None
    marketplace: Any = None
    plugin_routes: Any = None


def _json(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body, ensure_ascii=False, default=str), status=status,
                    content_type="application/json; charset=utf-8")


def _error(status: int, code: str, message: str) -> Response:
    return _json({"error": {"code": code, "message": message}}, status)


async def _body_json() -> Any:
    """The request body as JSON, or None when it is missing or unusable
    (invalid UTF-8 or JSON, absurd nesting): callers answer 400 then."""
    try:
        return await request.get_json(force=True, silent=True)
    except (ValueError, RecursionError, UnicodeDecodeError):
        return None


def _client_host(scope: dict) -> str | None:
    client = scope.get("client")
    return client[0] if client else None


def create_app(services: AppServices) -> QuartTrio:
    """Build the app.  Routes are the contract of DESIGN.md §15."""
    app = QuartTrio("ongridd")
    app.config["MAX_CONTENT_LENGTH"] = 4 * 1024 * 1024
    app.config["RESPONSE_TIMEOUT"] = 300
    app.ongrid = services  # type: ignore[attr-defined]

    def origin_problem(headers: Any) -> str | None:
        """Browser protection: a cross-site page (Origin of another site) or
        a DNS-rebinding name (Host not loopback while no tokens are set)
        must not drive the daemon.  CLIs send no Origin and pass."""
        host = (headers.get("Host") or "").strip().lower()
        if services.auth.open_mode:
            name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
            if name and not is_loopback(name.strip("[]")):
                return (f"Host {host!r} is not a loopback name; with no tokens configured the daemon answers "
                        "only requests addressed to 127.0.0.1, localhost or [::1]")
        origin = headers.get("Origin")
        if origin is not None:
            parsed = urlsplit(origin.strip())
            if origin.strip() == "null" or parsed.netloc.lower() != host:
                return f"cross-origin request from {origin[:100]!r} refused"
        return None

    @app.before_request
    async def _check_origin():
        problem = origin_problem(request.headers)
        if problem:
            return _error(403, "forbidden", problem)
        return None

    @app.before_websocket
    async def _check_ws_origin():
        problem = origin_problem(websocket.headers)
        if problem:
            log.warning("websocket_refused", reason=problem)
            abort(403)
        return None

    def current_user() -> str:
        return services.auth.authenticate(bearer_token(request.headers.get("Authorization")),
                                          _client_host(request.scope))

    @app.errorhandler(AuthError)
    async def _auth_error(exc: AuthError):
        return _error(401, "unauthorized", str(exc))

    @app.errorhandler(NotFound)
    async def _not_found(exc: NotFound):
        return _error(404, "not_found", str(exc))

    @app.errorhandler(TaskStateError)
    async def _conflict(exc: TaskStateError):
        return _error(409, "conflict", str(exc))

    @app.errorhandler(OngridError)
    async def _bad(exc: OngridError):
        return _error(400, "bad_request", str(exc))

    @app.get("/healthz")
    async def healthz():
        return _json({"status": "ok"})

    @app.get("/metrics")
    async def metrics():
        if services.runtime is not None and hasattr(services.runtime, "refresh_metrics"):
            services.runtime.refresh_metrics()
        return Response(generate_latest(), content_type=CONTENT_TYPE_LATEST)

    # ---- agents ---------------------------------------------------------
    @app.get("/api/agents")
    async def agents_list():
        current_user()
        return _json(services.agents_api.list())

    @app.get("/api/agents/<name>")
    async def agents_get(name: str):
        current_user()
        return _json(services.agents_api.get(name))

    @app.put("/api/agents/<name>")
    async def agents_put(name: str):
        user = current_user()
        body = await request.get_data()  # bytes: the parser reports invalid UTF-8 itself
        return _json(await services.agents_api.put(name, body, actor=user))

    @app.delete("/api/agents/<name>")
    async def agents_delete(name: str):
        user = current_user()
        return _json(await services.agents_api.delete(name, actor=user))

    # ---- sessions -------------------------------------------------------
    @app.get("/api/sessions/<session_id>/tree")
    async def session_tree(session_id: str):
        user = current_user()
        return _json(await services.runtime.session_tree(session_id, user_id=user))

    @app.get("/api/sessions/<session_id>/audit")
    async def session_audit(session_id: str):
        user = current_user()
        return _json(await services.runtime.session_audit(session_id, user_id=user))

    # ---- marketplace ----------------------------------------------------
    @app.get("/api/marketplace")
    async def marketplace_list():
        current_user()
        return _json(await services.marketplace.list())

    @app.post("/api/marketplace/<action>")
    async def marketplace_action(action: str):
        user = current_user()
        if action not in ("install", "uninstall"):
            return _error(404, "not_found", f"no marketplace action {action!r}")
        body = await _body_json()
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            return _error(400, "bad_request", 'body must be {"name": "<plugin name>"}')
        fn = services.marketplace.install if action == "install" else services.marketplace.uninstall
        return _json(await fn(body["name"], actor=user))

    # ---- plugin routes (looked up per request: the table is swappable) --
    @app.route("/<path:path>", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
    async def plugin_route(path: str):
        table = services.plugin_routes() if services.plugin_routes else {}
        handler = table.get((request.method, "/" + path))
        if handler is None:
            return _error(404, "not_found", f"no route {request.method} /{path}")
        user = current_user()
        from ongridd.plugins.api import PluginRequest, PluginResponse

        body = await _body_json()
        preq = PluginRequest(method=request.method, path="/" + path, headers=dict(request.headers),
                             query=dict(request.args), json=body, user=user)
        try:
            resp = await handler(preq)
        except OngridError as exc:
            return _error(400, "bad_request", str(exc))
        except Exception:
            log.exception("plugin_route_failed", path="/" + path)
            return _error(500, "internal", "the plugin route failed; see the daemon log")
        if isinstance(resp, PluginResponse):
            return _json(resp.body, resp.status)
        return _json(resp)

    @app.get("/")
    async def index():
        from ongridd.server.webpage import PAGE

        return Response(PAGE, content_type="text/html; charset=utf-8")

    @app.websocket("/ws")
    async def ws():
        from ongridd.server.ws import serve_chat_socket

        await serve_chat_socket(websocket, services)

    return app
