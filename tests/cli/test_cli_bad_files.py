"""Issue 14, finding 7 (the CLI half): a spec file that is not UTF-8, or holds text no JSON
client can send, is an error naming the file (and the byte offset), exit code 2, never a
Python traceback. Each command that reads spec files is tried; none reaches a server (the
URL points nowhere: the file is refused before any connection)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetpool.cli.main import app

NOWHERE = ["--url", "http://127.0.0.1:9", "--token", "hp_unused"]
GOOD = "kind: Task\nname: t\ntenant: ai-lab/nlp\ncommand: echo hi\n"
# "é" written in Latin-1 (0xe9) on line 4, column 16: byte offset 16 + 15 + 12 + 15 = 58.
LATIN1 = b"kind: Task\nname: t\ntenant: ai-lab/nlp\ncommand: echo caf\xe9\n"
LATIN1_OFFSET = LATIN1.index(b"\xe9")


def run(*args: str, stdin: bytes | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, [*args, *NOWHERE], input=stdin, env={"COLUMNS": "300"})
    output = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert result.exception is None or isinstance(result.exception, SystemExit), f"{result.exception!r}\n{output}"
    return result.exit_code, output


def one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("command", ["apply", "submit", "plan"])
def test_a_non_utf8_file_is_an_error_naming_the_file_and_the_byte_offset(tmp_path: Path, command: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(LATIN1)
    code, output = run(command, "-f", str(bad))
    text = one_line(output)
    assert code == 2, output
    assert "bad.yaml" in text and f"byte offset {LATIN1_OFFSET}" in text and "line 4" in text and "0xe9" in text, output
    assert "Traceback" not in output


def test_a_non_utf8_file_inside_a_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "a-good.yaml").write_text(GOOD)
    (tmp_path / "b-bad.yml").write_bytes(b"kind: Tenant\nname: \xff\xfe\n")
    code, output = run("apply", "-f", str(tmp_path))
    assert code == 2 and "b-bad.yml" in one_line(output) and "byte offset 19" in one_line(output), output


def test_non_utf8_standard_input_is_named_too() -> None:
    code, output = run("apply", "-f", "-", stdin=LATIN1)
    assert code == 2 and "<stdin>" in output and f"byte offset {LATIN1_OFFSET}" in one_line(output), output


def test_utf16_and_a_utf8_byte_order_mark(tmp_path: Path) -> None:
    utf16 = tmp_path / "wide.yaml"
    utf16.write_bytes(GOOD.encode("utf-16"))
    code, output = run("plan", "-f", str(utf16))
    assert code == 2 and "UTF-16" in output and "wide.yaml" in one_line(output), output
    from hetpool.cli.files import read_documents

    bom = tmp_path / "bom.yaml"
    bom.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())
    assert read_documents([str(bom)])[0][0]["name"] == "t"  # a UTF-8 BOM is fine


@pytest.mark.parametrize(
    ("line", "says"),
    [('command: "echo \\ud800"', "surrogate"), ('command: "echo \\0"', "NUL"), ('labels: {"\\udc00": x}', "surrogate")],
    ids=["surrogate-value", "nul-value", "surrogate-key"],
)
def test_yaml_escapes_no_json_client_can_send_are_named(tmp_path: Path, line: str, says: str) -> None:
    bad = tmp_path / "escapes.yaml"
    bad.write_text(f"kind: Task\nname: t\ntenant: ai-lab/nlp\n{line}\n")
    code, output = run("submit", "-f", str(bad))
    text = one_line(output)
    assert code == 2 and "escapes.yaml#1" in text and says in text and "Traceback" not in output, output
    assert ("command" in text) or ("labels" in text), output


def test_a_file_that_cannot_be_read_is_named() -> None:
    # /proc/self/mem opens (even as root) and fails on read with EIO: an OSError, as a bad
    # disk or a permission problem would be.
    code, output = run("apply", "-f", "/proc/self/mem")
    assert code == 2 and "/proc/self/mem" in one_line(output) and "cannot be read" in output and "Traceback" not in output, output


def test_a_file_that_is_too_large_is_refused_before_it_is_read_whole(tmp_path: Path) -> None:
    from hetpool.core.specs import MAX_SPEC_BYTES

    big = tmp_path / "big.yaml"
    with open(big, "wb") as out:
        out.truncate(MAX_SPEC_BYTES * 4)  # sparse: costs no disk
    code, output = run("apply", "-f", str(big))
    assert code == 2 and "big.yaml" in one_line(output) and "larger than" in output, output


def test_the_real_command_prints_no_traceback(tmp_path: Path) -> None:
    """The installed entry point, as a user runs it: one line on stderr, exit 2."""
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(LATIN1)
    done = subprocess.run(
        [sys.executable, "-m", "hetpool.cli.main", "apply", "-f", str(bad), *NOWHERE],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "300"},
    )
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr and f"byte offset {LATIN1_OFFSET}" in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b'{"id": "caf\xe9"}\n', "byte offset 11"),
        (b"\nnot json\n", "trace.jsonl:2: not a JSON line"),
        (b"[1, 2]\n", "trace.jsonl:1: expected a JSON object"),
    ],
    ids=["not-utf8", "not-json", "not-an-object"],
)
def test_a_bad_simulation_trace_is_an_error_naming_the_file(tmp_path: Path, content: bytes, says: str) -> None:
    from tests.conftest import DEMO_DIR

    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(content)
    result = CliRunner().invoke(app, ["sim", "run", "--trace", str(trace), "--inventory", str(DEMO_DIR)], env={"COLUMNS": "300"})
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    code, output = result.exit_code, result.output
    assert code == 2 and "trace.jsonl" in one_line(output) and says in one_line(output), output
