"""Rendering pages: one Jinja environment per language (its catalog installed through
`jinja2.ext.i18n`, so templates call `_()`, `ngettext()`, `pgettext()` and `{% trans %}`), the
layout's navigation, and the page context every template gets (lang, user, nav, csrf, and
`label`/`translate` for texts named in Python: see web/labels.py)."""

from __future__ import annotations

import json
from functools import cache, partial
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

from hetpool.web.i18n import N_, Translator, pick_language, translations, translator
from hetpool.web.labels import has_label, label
from hetpool.web.reasons import explanation_text
from hetpool.web.session import LANG_COOKIE, Viewer

TEMPLATE_DIR = Path(__file__).parent / "templates"

# (path, label, action the user needs to see the entry, or None for everyone)
NAV: tuple[tuple[str, str, str | None], ...] = (
    ("/", N_("Overview"), None),
    ("/resources", N_("Resources"), None),
    ("/tasks", N_("Tasks"), None),
    ("/tenants", N_("Tenants & quotas"), None),
    ("/approvals", N_("Approvals"), None),
    ("/cost", N_("Cost"), None),
    ("/audit", N_("Audit"), "audit.read"),
    ("/capacity", N_("Capacity"), None),
)


@cache
def templates(lang: str) -> Environment:
    """The Jinja environment of one language: its gettext callables installed once, so a
    render never swaps translations under another request."""
    env = Environment(loader=FileSystemLoader(TEMPLATE_DIR), autoescape=select_autoescape(), extensions=["jinja2.ext.i18n"])
    env.install_gettext_translations(translations(lang), newstyle=True)  # type: ignore[attr-defined]
    env.filters["tojson_attr"] = lambda value: Markup.escape(json.dumps(value, ensure_ascii=False))
    tr = translator(lang)
    env.globals["label"] = partial(label, tr)
    env.globals["has_label"] = has_label
    env.globals["translate"] = tr.text
    env.globals["reason"] = tr.reason
    env.globals["reasons"] = tr.reasons
    env.globals["explain"] = partial(explanation_text, tr=tr)  # a task's pending / a plan's explanation
    return env


def translator_for(request: Request, user: Viewer | None) -> Translator:
    """Translating in a page's Python code, in the language the page is rendered in."""
    return translator(language_for(request, user))


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
    tr = translator(lang)
    nav = [(path, tr.gettext(text)) for path, text, needs in NAV if user is not None and (needs is None or user.may(needs))]
    html = (
        templates(lang)
        .get_template(template)
        .render(
            lang=lang,
            other_lang="zh-CN" if lang == "en" else "en",
            user=user,
            csrf=user.csrf if user else "",
            nav=nav,
            active=active or request.url.path,
            request=request,
            **context,
        )
    )
    return HTMLResponse(html, status_code=status_code)
