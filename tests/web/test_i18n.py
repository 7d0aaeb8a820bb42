"""The dashboard's translations: every text the templates and the Python code mark for
translation has a Chinese one in the zh-CN catalog, the catalog holds nothing stale, the
committed .mo is compiled from the committed .po, plural forms work, and every reason the
scheduling core and the catalog can give is translated."""

from __future__ import annotations

import ast
import inspect
import io
import re
import string
from pathlib import Path

import pytest
from babel.messages.extract import DEFAULT_KEYWORDS, extract_from_dir
from babel.messages.frontend import parse_mapping_cfg
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from typer.testing import CliRunner

import hetpool.web
from hetpool.catalog import compat
from hetpool.cli.main import app as cli
from hetpool.scheduling import assign, cycle, explain, filters
from hetpool.web.i18n import GETTEXT_LOCALES, LOCALE_DIR, translations, translator
from hetpool.web.reasons import OTHER_TENANTS_TASK, REASON_TEXTS, SUMMARY_TEXTS, UNKNOWN_TIME, VICTIM_KINDS

WEB = Path(hetpool.web.__file__).parent
PO = LOCALE_DIR / "zh_CN" / "LC_MESSAGES" / "messages.po"
MO = PO.with_suffix(".mo")


def _extracted() -> set[tuple[str | None, str | tuple[str, ...]]]:
    """What `make i18n` extracts: (context, message id) of every marked text."""
    with (WEB / "babel.cfg").open() as cfg:
        method_map, options_map = parse_mapping_cfg(cfg)
    keywords = {**DEFAULT_KEYWORDS, "C_": ((1, "c"), 2)}  # the Makefile's -k C_:1c,2
    found = set()
    for _filename, _lineno, message, _comments, context in extract_from_dir(str(WEB), method_map, options_map, keywords=keywords):
        found.add((context, message))
    return found


@pytest.fixture(scope="module")
def extracted() -> set:
    return _extracted()


@pytest.fixture(scope="module")
def catalog():
    with PO.open("rb") as fp:
        return read_po(fp, locale="zh_CN")


def test_no_text_is_missing_in_chinese(extracted: set, catalog) -> None:
    assert len(extracted) > 500  # the extraction found the dashboard, not an empty folder
    missing, empty, fuzzy = [], [], []
    for context, msgid in extracted:
        message = catalog.get(msgid, context=context)
        if message is None:
            missing.append((context, msgid))
        elif not all(message.string if isinstance(message.string, tuple) else (message.string,)):
            empty.append((context, msgid))
        elif message.fuzzy:
            fuzzy.append((context, msgid))
    assert not missing, f"not in the zh_CN catalog (run `make i18n`, then translate): {missing}"
    assert not empty, f"no Chinese text: {empty}"
    assert not fuzzy, f"fuzzy (unchecked) translations: {fuzzy}"


def test_the_catalog_holds_no_obsolete_or_stale_entries(extracted: set, catalog) -> None:
    assert not catalog.obsolete, f"obsolete entries (run `make i18n`): {list(catalog.obsolete)}"
    ids = {(m.context, m.id) for m in catalog if m.id}
    stale = ids - extracted
    assert not stale, f"in the catalog but no longer in the code (run `make i18n`): {stale}"


def test_the_committed_mo_is_compiled_from_the_po(catalog) -> None:
    """The .mo is committed so a fresh clone needs no build step; it must match the .po."""
    compiled = io.BytesIO()
    write_mo(compiled, catalog)
    assert MO.read_bytes() == compiled.getvalue(), "messages.mo is out of date: run `make i18n`"


def test_every_language_but_english_has_a_catalog() -> None:
    assert set(GETTEXT_LOCALES) == {"zh-CN"}
    assert translations("zh-CN").gettext("Overview") == "总览"
    assert translations("en").gettext("Overview") == "Overview"  # English texts are the message ids


def test_plural_forms() -> None:
    en, zh = translator("en"), translator("zh-CN")
    one, many = "%(num)d event shown", "%(num)d events shown"
    assert en.ngettext(one, many, 1) == "1 event shown" and en.ngettext(one, many, 3) == "3 events shown"
    assert zh.ngettext(one, many, 1) == "显示 1 条事件" and zh.ngettext(one, many, 3) == "显示 3 条事件"


def test_named_values_and_contexts() -> None:
    zh = translator("zh-CN")
    assert zh.gettext("Sign-in failed: %(message)s", message="x") == "登录失败：x"
    assert zh.gettext("Idle below (utilisation %%)") == "空闲阈值（利用率 %）"
    # The same English words, translated by where they stand.
    assert zh.gettext("Devices per worker") != zh.pgettext("tasks.spec.devices", "Devices per worker")


def _core_reasons() -> set[str]:
    reasons = set()
    for module, prefix in ((filters, "REASON_"), (assign, "REASON_"), (cycle, "REASON_"), (compat, "R_")):
        reasons |= {value for name, value in vars(module).items() if name.startswith(prefix) and isinstance(value, str)}
    return reasons


def test_every_reason_of_the_scheduling_core_is_translated() -> None:
    reasons = _core_reasons()
    assert "not enough free devices" in reasons and "unknown framework" in reasons
    assert not reasons - set(REASON_TEXTS), "add the new reasons to web/reasons.py, then `make i18n`"
    zh = translator("zh-CN")
    assert all(zh.reason(r) != r for r in reasons)
    assert zh.reasons({"not enough free devices": 2, "quota exceeded": 5}) == "5 超出配额, 2 空闲设备不足"
    assert zh.reason("a node's own words") == "a node's own words"  # free text passes through


def _core_sentences() -> set[str]:
    """Every sentence scheduling/explain.py renders: its templates (SUMMARY_TEMPLATES and any
    module constant named *_TEMPLATE or *_TEXT) and the literals it passes to gettext."""
    sentences = set(explain.SUMMARY_TEMPLATES.values())
    sentences |= {v for k, v in vars(explain).items() if k.endswith(("_TEMPLATE", "_TEXT")) and isinstance(v, str)}
    for node in ast.walk(ast.parse(inspect.getsource(explain))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "gettext" and node.args and isinstance(node.args[0], ast.Constant):
            sentences.add(node.args[0].value)
    return sentences


def _fields(text: str) -> set[tuple[str, str]]:
    return {(name, spec or "") for _, name, spec, _ in string.Formatter().parse(text) if name is not None}


def test_every_explanation_sentence_of_the_core_is_translated() -> None:
    sentences = _core_sentences()
    assert explain.FITS_FALLBACK_TEMPLATE in sentences and "no candidates" in sentences
    assert explain.VICTIMS_BORROWING_TEXT in sentences  # the words filled into facts are checked too
    listed = {*SUMMARY_TEXTS, *VICTIM_KINDS, UNKNOWN_TIME, OTHER_TENANTS_TASK}
    assert not sentences - listed, "add the new sentences of scheduling/explain.py to web/reasons.py, then `make i18n`"
    zh = translator("zh-CN")
    untranslated = [s for s in sentences if zh.reason(s) == s]
    assert not untranslated, f"no Chinese for: {untranslated}"


def test_a_translated_sentence_keeps_the_fields_of_the_english_one() -> None:
    """`render` fills the translation with the English template's facts: a field renamed,
    dropped or added in Chinese would lose a fact or fall back to the bare reason."""
    zh = translator("zh-CN")
    for text in SUMMARY_TEXTS:
        assert _fields(zh.reason(text)) == _fields(text), f"{text!r} → {zh.reason(text)!r}"


@pytest.mark.parametrize("lang", ["en", "zh-CN"])
def test_the_login_page_names_commands_that_exist(lang: str) -> None:
    """The sign-in hint tells people which command makes a token: it must exist, options included."""
    template = (WEB / "templates" / "login.html").read_text()
    hints = [msgid for msgid in re.findall(r'_\("([^"]*)"', template) if "`hetpool " in msgid]
    assert hints, "the login page names no command"
    commands = [c for hint in hints for c in re.findall(r"`hetpool ([^`]+)`", translator(lang).gettext(hint))]
    assert len(commands) >= 2
    runner = CliRunner()
    for command in commands:
        words = command.split()
        path = [w for w in words if not w.isupper() and not w.startswith("-")]
        result = runner.invoke(cli, [*path, "--help"])
        assert result.exit_code == 0, f"`hetpool {command}` does not exist: {result.output}"
        for option in (w for w in words if w.startswith("--")):
            assert option in result.output, f"`hetpool {' '.join(path)}` has no {option}"
