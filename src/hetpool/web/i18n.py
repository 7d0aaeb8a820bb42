"""Translations for the dashboard. Every label has an English and a Simplified Chinese text.

Each area of the dashboard keeps its labels in its own module under `web/messages/`
(a `MESSAGES` dict); they are merged here, and a duplicate key is an error at import."""

from __future__ import annotations

import importlib
import pkgutil

from hetpool.web import messages as _messages_pkg

LANGUAGES = ("en", "zh-CN")


def _load() -> dict[str, dict[str, str]]:
    merged: dict[str, dict[str, str]] = {}
    for info in sorted(pkgutil.iter_modules(_messages_pkg.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{_messages_pkg.__name__}.{info.name}")
        for key, texts in module.MESSAGES.items():
            if key in merged:
                raise RuntimeError(f"dashboard label {key!r} is defined twice (web/messages/{info.name}.py)")
            missing = [lang for lang in LANGUAGES if not texts.get(lang)]
            if missing:
                raise RuntimeError(f"dashboard label {key!r} has no text for {missing} (web/messages/{info.name}.py)")
            merged[key] = texts
    return merged


MESSAGES: dict[str, dict[str, str]] = _load()


def pick_language(query_lang: str | None, stored: str | None, cookie_lang: str | None, accept_language: str | None) -> str:
    """An explicit ?lang= wins, then the user's stored choice, then the cookie, then the browser."""
    for candidate in (query_lang, stored, cookie_lang):
        if candidate in LANGUAGES:
            return candidate
    if accept_language and accept_language.lower().startswith("zh"):
        return "zh-CN"
    return "en"


def translator(lang: str):
    """t(key) → text; t(key, n=3) formats {n}. An unknown key shows itself, so a missing
    label is visible on the page (and tests/web/test_i18n.py fails)."""

    def t(key: str, **values) -> str:
        texts = MESSAGES.get(key)
        if texts is None:
            return key
        text = texts[lang]
        return text.format(**values) if values else text

    return t


def label_or_value(t, prefix: str, value: str) -> str:
    """A translated enum value (state.running → 运行中) or the value itself when unlabelled."""
    key = f"{prefix}.{value}"
    return t(key) if key in MESSAGES else value
