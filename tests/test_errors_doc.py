"""docs/errors.md lists every message rlsched raises for users, and each has a test that triggers it
(issue 34).

What counts as a message, mechanically: every ``raise`` of one of ``rlsched.errors``' classes (or a
subclass defined in the package) and every ``argparse.ArgumentTypeError`` in ``rlsched/``, read with
``ast``. A message's *fragment* is the longest constant run of text in its message argument (the
``why`` of ``ConfigError(where, why)``, ``TraceFormatError(path, line, why)`` and
``InvalidRequest(field, value, why)``; the one argument of the others), cut at its ends to whole
words: the part of the message a user sees whatever the values. A fragment of fewer than
``MIN_FRAGMENT`` characters (``"must be "``) says too little to look for; a message with none
(``ConfigError(where, str(exc))``) passes another error's text on and is that error's message.

Documented: the fragment appears in docs/errors.md. Triggered: it appears in a test file under
``tests/`` (a ``match=`` or an assertion's text), or the message is in ``UNTRIGGERED`` below — the
known gaps (``tests/data/untriggered_errors.txt``), which only shrink: a test fails when an entry there
is no longer needed or names no message.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import rlsched.errors

ROOT = Path(__file__).resolve().parents[1]
PACKAGE, DOC, TESTS = ROOT / "rlsched", ROOT / "docs" / "errors.md", ROOT / "tests"
MIN_FRAGMENT = 12
MESSAGE_ARG = {"ConfigError": 1, "OutputPathError": 2, "TraceFormatError": 2, "InvalidRequest": 2}
"""Which positional argument holds the message text (default: the first)."""


@dataclass(frozen=True)
class Message:
    where: str
    """``path:line`` of the raise."""
    error: str
    fragment: str


def error_classes() -> set[str]:
    """The names of rlsched.errors' classes and of every class in the package derived from one."""
    names = {n for n, v in vars(rlsched.errors).items() if isinstance(v, type) and issubclass(v, Exception)}
    names.discard("TraceRowsSkipped")  # a warning
    grew = True
    trees = [ast.parse(p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))]
    while grew:
        grew = False
        for tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name not in names and any(
                        _name(b) in names for b in node.bases):
                    names.add(node.name)
                    grew = True
    return names | {"ArgumentTypeError"}


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _runs(node: ast.AST) -> list[str]:
    """The constant text pieces of a string expression (an f-string's literal parts, ``+`` operands),
    each without the word a value is glued to (``got {x}`` keeps ``got``; ``{n}px wide`` drops ``px``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _runs(node.left) + _runs(node.right)
    if not isinstance(node, ast.JoinedStr):
        return []
    out, parts = [], node.values
    for i, part in enumerate(parts):
        if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
            continue
        words = part.value.split(" ")
        if i > 0 and not part.value[:1].isspace():  # glued to the value before it
            words = words[1:]
        if i < len(parts) - 1 and not part.value[-1:].isspace():  # glued to the value after it
            words = words[:-1]
        out.append(" ".join(words))
    return out


def fragment(node: ast.AST) -> str:
    """The longest constant run of ``node``'s text, without outer spaces and punctuation."""
    runs = [r.strip(" :;,.(){}'\"\n").strip() for r in _runs(node)]
    return max(runs, key=len, default="")


def messages() -> list[Message]:
    classes, out = error_classes(), []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                continue
            error = _name(node.exc.func)
            if error not in classes or error == "MissingExtra":  # MissingExtra: one template, its class's
                continue
            args = node.exc.args
            index = MESSAGE_ARG.get(error, 0)
            text = fragment(args[index]) if len(args) > index else ""
            out.append(Message(f"{path.relative_to(ROOT)}:{node.lineno}", error, text))
    return out


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text)


MESSAGES = messages()
CHECKED = [m for m in MESSAGES if len(m.fragment) >= MIN_FRAGMENT]
DOC_TEXT = _normal(DOC.read_text())
_SOURCES = "\n".join(p.read_text() for p in sorted(TESTS.rglob("*.py")) if p.name != Path(__file__).name)
TEST_TEXT = _normal(re.sub(r"\\(?=[^\w\s])", "", re.sub(r'"\s*\\?\s*\n\s*[fr]*"', "", _SOURCES)))
r"""The tests' text: adjacent string literals joined (``"a " "b"`` over two lines, or after a ``\``
continuation, is ``"a b"``), regex escapes (``match=r"\(x\)"``) read as the text they match."""

UNTRIGGERED_FILE = TESTS / "data" / "untriggered_errors.txt"
UNTRIGGERED = {line for line in UNTRIGGERED_FILE.read_text().splitlines() if line and not line.startswith("#")}
"""Fragments of documented messages that no test under tests/ triggers yet (issue 34's known gaps:
shrinking it is the next person's job; a test below fails when an entry is no longer needed)."""


def test_the_collection_finds_the_messages() -> None:
    """The extraction is not vacuous: it finds hundreds of raises, and known messages among them."""
    assert len(MESSAGES) > 300 and len(CHECKED) > 200
    frags = {m.fragment for m in CHECKED}
    assert "not a valid safetensors file (header length" in frags
    assert "header only: the trace has no requests" in frags


@pytest.mark.parametrize("message", CHECKED, ids=lambda m: m.where)
def test_every_message_is_in_the_errors_page(message: Message) -> None:
    assert _normal(message.fragment) in DOC_TEXT, f"{message.where}: {message.fragment!r} is not in docs/errors.md"


@pytest.mark.parametrize("message", CHECKED, ids=lambda m: m.where)
def test_every_documented_message_has_a_test_that_triggers_it(message: Message) -> None:
    found = _normal(message.fragment) in TEST_TEXT
    if message.fragment in UNTRIGGERED:
        assert not found, f"{message.fragment!r} is triggered now: remove it from UNTRIGGERED"
    else:
        assert found, f"{message.where}: no test under tests/ checks {message.fragment!r}"


def test_every_untriggered_entry_names_a_message() -> None:
    stale = UNTRIGGERED - {m.fragment for m in CHECKED}
    assert not stale, f"{UNTRIGGERED_FILE.name} lists fragments no raise site has (message changed or removed): {stale}"
