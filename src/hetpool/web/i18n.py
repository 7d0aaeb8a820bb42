"""Translations for the dashboard and the API's reason texts: gettext message catalogs.

English is the source language: a message id is the English text itself, so English needs no
catalog. Simplified Chinese lives in `web/locale/zh_CN/LC_MESSAGES/messages.po`, compiled to
`messages.mo` (both committed, so a fresh clone renders without a build step); `make i18n`
extracts the texts from the templates and the Python code (babel.cfg), updates the catalog
and compiles it. docs/dashboard.md says how to add a text.

Every text is %-formatted with its named values, in templates (`jinja2.ext.i18n` with
`newstyle=True`) and in Python (`Translator`) alike, so a literal per cent sign is written
`%%` in every message id."""

from __future__ import annotations

import gettext as _gettext
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from babel.support import Translations

LANGUAGES = ("en", "zh-CN")
LOCALE_DIR = Path(__file__).parent / "locale"
DOMAIN = "messages"
# The dashboard's language codes (BCP 47, as in Accept-Language) → gettext's locale names.
GETTEXT_LOCALES = {"zh-CN": "zh_CN"}


class Message(NamedTuple):
    """An English text with a context: the same English words that read differently in
    Chinese depending on where they stand (pgettext's msgctxt)."""

    context: str
    text: str


def N_(text: str) -> str:
    """Marks `text` for extraction without translating it (it is translated where shown)."""
    return text


def C_(context: str, text: str) -> Message:
    """N_ with a message context."""
    return Message(context, text)


@cache
def translations(lang: str) -> _gettext.NullTranslations:
    """The compiled catalog of a language, loaded once. English is the message ids themselves."""
    if lang not in GETTEXT_LOCALES:
        return _gettext.NullTranslations()
    mo = LOCALE_DIR / GETTEXT_LOCALES[lang] / "LC_MESSAGES" / f"{DOMAIN}.mo"
    if not mo.is_file():  # a missing catalog would silently show English: refuse to start instead
        raise RuntimeError(f"no compiled catalog for {lang} at {mo}: run `make i18n`")
    with mo.open("rb") as fp:
        return Translations(fp, domain=DOMAIN)


class Translator:
    """Translating in Python code (chart series names, form errors, durations) the way the
    templates do: gettext, then %-formatting with the named values."""

    def __init__(self, lang: str) -> None:
        self.lang = lang
        self.catalog = translations(lang)

    def gettext(self, text: str, /, **values: Any) -> str:
        return self.catalog.gettext(text) % values

    def pgettext(self, context: str, text: str, /, **values: Any) -> str:
        return self.catalog.pgettext(context, text) % values

    def ngettext(self, singular: str, plural: str, num: int, /, **values: Any) -> str:
        return self.catalog.ngettext(singular, plural, num) % {"num": num, **values}

    def reason(self, text: str) -> str:
        """A text the API wrote (its reason codes are their English words, web/reasons.py):
        translated when the catalog knows it, else as written. Never %-formatted. A reason
        with its detail ('incompatible software stack: framework not installed') is
        translated part by part when the catalog does not know it whole."""
        if not text:
            return text  # gettext("") is the header
        translated = self.catalog.gettext(text)
        head, colon, detail = text.partition(": ")
        if translated != text or not colon:
            return translated
        return self.reason(head) + self.pgettext("reasons.detail", ": ") + self.reason(detail)

    def reasons(self, counts: dict[str, int] | None) -> str:
        """{'not enough free devices': 2} → '2 not enough free devices' (2 空闲设备不足), most first."""
        return ", ".join(f"{count} {self.reason(reason)}" for reason, count in sorted((counts or {}).items(), key=lambda kv: -kv[1]))

    def text(self, message: str | Message, /, **values: Any) -> str:
        """A text marked with N_ or C_ elsewhere (label tables, view models)."""
        if isinstance(message, Message):
            return self.pgettext(message.context, message.text, **values)
        return self.gettext(message, **values)


@cache
def translator(lang: str) -> Translator:
    return Translator(lang)


def pick_language(query_lang: str | None, stored: str | None, cookie_lang: str | None, accept_language: str | None) -> str:
    """An explicit ?lang= wins, then the user's stored choice, then the cookie, then the browser."""
    for candidate in (query_lang, stored, cookie_lang):
        if candidate in LANGUAGES:
            return candidate
    if accept_language and accept_language.lower().startswith("zh"):
        return "zh-CN"
    return "en"
