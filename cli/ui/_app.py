"""The inspector's ASGI app (Starlette): each page rendered on the server from a view
(``cli.ui._views``) through a Jinja2 template, and the same view as JSON under ``/api``.

Access: every request must carry the token the command printed, as ``?token=`` (the printed
URL) or the cookie the first such request sets (``HttpOnly``, ``SameSite=Strict``); without it,
403. A POST (approve, deny) must also carry it as a form field, so a page of another site cannot
make the browser post one. Approving and denying exist only when the app was made with
``allow_approvals``; they take the same journaled path as ``world effects approve|deny``.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from air.errors import UnknownName, UsageError, WorldError
from cli.core import parse_key_arg
from cli.ui import _views as views

__all__ = ["COOKIE", "make_app"]

COOKIE: Final = "world_ui_token"
TEMPLATES: Final = Path(__file__).parent / "templates"

View = Callable[[Request], dict[str, Any]]


class _TokenGate(BaseHTTPMiddleware):
    def __init__(self, app: Any, token: str) -> None:
        super().__init__(app)
        self.token = token

    async def dispatch(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        given = request.query_params.get("token")
        from_query = given is not None and _same(given, self.token)
        cookie = request.cookies.get(COOKIE)
        if not from_query and not (cookie is not None and _same(cookie, self.token)):
            return PlainTextResponse("403: this inspector needs the token its URL gave", 403)
        response = await call_next(request)
        if from_query:
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict")
        return response


def make_app(directory: Path, token: str, *, allow_approvals: bool = False) -> Starlette:
    """The inspector of the world at ``directory``."""
    templates = Jinja2Templates(directory=str(TEMPLATES))
    templates.env.globals.update(world=str(directory), approvals=allow_approvals)
    templates.env.filters["pretty"] = _pretty
    # Plain text, so autoescape escapes it in attributes too (Jinja's ``tojson`` is Markup and
    # leaves ``"`` as it is: a key with a quote would end a value="..." early).
    templates.env.filters["json"] = _json
    templates.env.filters["without"] = lambda given, name: {
        k: v for k, v in given.items() if k != name
    }

    def page(name: str, view: View) -> Callable[[Request], Awaitable[Response]]:
        async def html(request: Request) -> Response:
            try:
                data = view(request)
            except WorldError as exc:
                status = 404 if isinstance(exc, UnknownName) else 400
                context = {"error": str(exc), "code": _code(exc), "data": {}}
                return templates.TemplateResponse(request, "error.html", context, status)
            context = {"data": data, "query": dict(request.query_params), "token": token}
            return templates.TemplateResponse(request, f"{name}.html", context)

        return html

    def api(view: View) -> Callable[[Request], Awaitable[Response]]:
        async def answer(request: Request) -> Response:
            try:
                data = view(request)
            except WorldError as exc:
                status = 404 if isinstance(exc, UnknownName) else 400
                failed = {"ok": False, "error": type(exc).__name__, "code": _code(exc)}
                return JSONResponse({**failed, "detail": str(exc)}, status)
            return JSONResponse({"ok": True, **data})

        return answer

    async def decide(request: Request) -> Response:
        if not allow_approvals:
            return PlainTextResponse("403: started without --allow-approvals", 403)
        form = await request.form()
        if not _same(str(form.get("token", "")), token):
            return PlainTextResponse("403: the form must carry the token", 403)
        decision = form.get("decision")
        if decision not in ("approve", "deny"):
            return PlainTextResponse("400: decision must be approve or deny", 400)
        approved = decision == "approve"
        try:
            views_decide(directory, str(form.get("intent", "")), approved)
        except WorldError as exc:
            return PlainTextResponse(f"400: {exc}", 400)
        return RedirectResponse("/effects", status_code=303)

    pages: dict[str, View] = {
        "world": lambda r: views.world_view(directory),
        "journal": lambda r: views.journal_view(directory, **_journal_args(r)),
        "record": lambda r: views.record_view(directory, _seq(r)),
        "cell": lambda r: views.cell_view(
            directory, _text(r, "reducer"), _key(r), at=_int(r, "at"), limit=_int(r, "limit") or 50
        ),
        "cells": lambda r: views.cells_view(
            directory,
            _text(r, "reducer"),
            _key(r, "after") if r.query_params.get("after") else None,
        ),
        "why": lambda r: views.why_view(directory, _text(r, "reducer"), _key(r), _int(r, "at")),
        "runs": lambda r: views.runs_view(directory),
        "plan": lambda r: views.plan_view(directory, _text(r, "name"), r.query_params.get("run")),
        "effects": lambda r: views.effects_view(directory),
        "upgrades": lambda r: views.upgrades_view(directory, _int(r, "id")),
    }
    routes = [Route("/", page("world", pages["world"]))]
    for name, view in pages.items():
        routes.append(Route(f"/{name}", page(name, view)))
        routes.append(Route(f"/api/{name}", api(view)))
    routes.append(Route("/effects/decide", decide, methods=["POST"]))
    return Starlette(routes=routes, middleware=[Middleware(_TokenGate, token=token)])


def views_decide(directory: Path, intent: str, approved: bool) -> int:
    from world import attach

    with attach(directory) as handle:
        return handle.decide(intent, approved)


def _journal_args(request: Request) -> dict[str, Any]:
    return {
        "start": _int(request, "from"),
        "limit": _int(request, "limit") or 100,
        "subject": request.query_params.get("subject") or None,
        "kind": request.query_params.get("kind") or None,
        "reducer": request.query_params.get("reducer") or None,
        "run": _int(request, "run"),
        "intent": request.query_params.get("intent") or None,
        "key": _key(request) if request.query_params.get("key") else None,
    }


def _seq(request: Request) -> int:
    seq = _int(request, "seq")
    if seq is None:
        raise _Missing("seq")
    return seq


def _text(request: Request, name: str) -> str:
    value = request.query_params.get(name)
    if not value:
        raise _Missing(name)
    return value


def _key(request: Request, name: str = "key") -> Any:
    return parse_key_arg(_text(request, name))


def _int(request: Request, name: str) -> int | None:
    value = request.query_params.get(name)
    if value is None or value == "":
        return None
    if not (value.isascii() and value.isdigit()):  # "²".isdigit(), and int() refuses it
        raise _NotANumber(name, value)
    return int(value)


class _Missing(UsageError):
    def __init__(self, name: str) -> None:
        self.code = "ui.missing"
        super().__init__(f"the page needs ?{name}=")


class _NotANumber(UsageError):
    def __init__(self, name: str, value: str) -> None:
        self.code = "ui.not_a_number"
        super().__init__(f"?{name}= must be a number, 0 or more, not {value!r}")


def _code(exc: WorldError) -> str:
    """The error's code, as the CLI's ``--json`` errors give it."""
    return str(getattr(exc, "code", None) or type(exc).__name__)


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _same(given: str, token: str) -> bool:
    """Whether ``given`` is the token, in constant time; any text (``compare_digest`` takes
    only ASCII ``str``: compare the UTF-8 bytes)."""
    return hmac.compare_digest(given.encode(), token.encode())
