"""The README is a front door: short, linking every docs/ page, and every ``rlsched`` command it and
docs/index.md show parses with the real CLI parser (a renamed or misspelt flag fails here)."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from rlsched.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
COMMAND_DOCS = (README, *sorted((ROOT / "docs").glob("*.md")))
MAX_README_LINES = 300
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
FENCE_WITH_LANG = re.compile(r"^```([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
SHELL = {"", "bash", "sh", "shell", "console"}
SEPARATORS = {"&&", "||", "|", ";", "&"}


def code_lines(text: str) -> list[str]:
    """Every shell line of every fenced block, continuation lines joined."""
    lines: list[str] = []
    for lang, block in FENCE_WITH_LANG.findall(text):
        if lang.strip() not in SHELL:
            continue
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip():
                lines.append(line)
    return lines


def rlsched_argvs(line: str) -> list[list[str]]:
    """The argument lists after each ``rlsched`` (or ``…/bin/rlsched``) that starts a command."""
    if "rlsched" not in line:
        return []
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    tokens = list(lexer)
    argvs, start = [], 0
    for i, tok in enumerate(tokens + [";"]):
        if tok in SEPARATORS:
            cmd = tokens[start:i]
            if cmd and (cmd[0] == "rlsched" or cmd[0].endswith("/bin/rlsched")):
                argvs.append(cmd[1:])
            start = i + 1
    return argvs


def parse_error(argv: list[str]) -> str | None:
    """None when the CLI's parser accepts ``argv`` (``--help`` counts), else what it printed."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code not in (0, None):
            return err.getvalue().strip() or f"exit {exc.code}"
    return None


def documented_commands() -> list[tuple[str, list[str]]]:
    return [(f"{doc.relative_to(ROOT)}: {line.strip()}", argv)
            for doc in COMMAND_DOCS for line in code_lines(doc.read_text()) for argv in rlsched_argvs(line)]


COMMANDS = documented_commands()


def test_each_command_doc_shows_commands() -> None:
    for doc in (README, ROOT / "docs" / "index.md"):
        assert any(str(doc.relative_to(ROOT)) == where.split(":")[0] for where, _ in COMMANDS), doc


@pytest.mark.parametrize(("where", "argv"), COMMANDS, ids=[w[:90] for w, _ in COMMANDS])
def test_a_documented_command_parses(where: str, argv: list[str]) -> None:
    assert parse_error(argv) is None, f"{where}\n{parse_error(argv)}"


def test_the_checker_refuses_a_misspelt_flag_and_a_made_up_command() -> None:
    assert rlsched_argvs("rlsched simulate --scenario default --polcy fifo  # a typo") == \
        [["simulate", "--scenario", "default", "--polcy", "fifo"]]
    assert parse_error(["simulate", "--scenario", "default", "--polcy", "fifo"]) is not None
    assert parse_error(["simulates", "--scenario", "default"]) is not None
    assert parse_error(["simulate", "--help"]) is None


def test_commands_are_found_after_pipes_and_paths() -> None:
    assert rlsched_argvs('cd x && .venv/bin/rlsched eval --policies "fifo;a=b" | tee out') == \
        [["eval", "--policies", "fifo;a=b"]]


def test_the_readme_is_a_front_door() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines (at most {MAX_README_LINES})"
    first_block = FENCE.search(README.read_text())
    assert first_block is not None
    assert [line.split("#")[0].strip() for line in first_block.group(1).splitlines()] == ["make run", "make test"]
    assert "## Install" in README.read_text() and 'pip install' in README.read_text()


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = set(re.findall(r"\]\((docs/[^)#\s]+\.md)", README.read_text()))
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert pages - linked == set(), f"not linked from README.md: {sorted(pages - linked)}"


@pytest.mark.parametrize("doc", [README, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    text = FENCE.sub("", doc.read_text())
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    missing = [t for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")
               and not (doc.parent / t.split("#")[0]).exists()]
    assert missing == [], f"{doc.relative_to(ROOT)}: links to missing files {missing}"
