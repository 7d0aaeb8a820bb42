"""Rendering pages: one Jinja environment, the layout's navigation, and the page context
every template gets (t, lang, user, nav, csrf)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

from hetpool.web.i18n import MESSAGES, label_or_value, pick_language, translator
from hetpool.web.session import LANG_COOKIE, Viewer

TEMPLATES = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"), autoescape=select_autoescape())
TEMPLATES.filters["tojson_attr"] = lambda value: Markup.escape(json.dumps(value, ensure_ascii=False))

# (path, label key, action the user needs to see the entry, or None for everyone)
NAV: tuple[tuple[str, str, str | None], ...] = (
    ("/", "nav.overview", None),
    ("/resources", "nav.resources", None),
    ("/tasks", "nav.tasks", None),
    ("/tenants", "nav.tenants", None),
    ("/approvals", "nav.approvals", None),
    ("/cost", "nav.cost", None),
    ("/audit", "nav.audit", "audit.read"),
    ("/capacity", "nav.capacity", None),
)


def language_for(request: Request, user: Viewer | None) -> str:
    return pick_language(
        request.query_params.get("lang"),
        user.language if user else None,
        request.cookies.get(LANG_COOKIE),
        request.headers.get("accept-language"),
    )


def render(request: Request, template: str, user: Viewer | None, *, status_code: int = 200, active: str = "", **context: Any) -> HTMLResponse:
    """A full page, or just its fragment when htmx asks for `fragment` (live refresh)."""
    lang = language_for(request, user)
    t = translator(lang)
    nav = [(path, t(key)) for path, key, needs in NAV if user is not None and (needs is None or user.may(needs))]
    html = TEMPLATES.get_template(template).render(
        t=t,
        lang=lang,
        other_lang="zh-CN" if lang == "en" else "en",
        user=user,
        csrf=user.csrf if user else "",
        nav=nav,
        active=active or request.url.path,
        request=request,
        known=MESSAGES,
        label=lambda prefix, value: label_or_value(t, prefix, value),
        **context,
    )
    return HTMLResponse(html, status_code=status_code)
