"""The command line's conventions: ``--version``, and an examples epilog on every subcommand whose
every example parses (a renamed flag fails here, not in a user's terminal)."""

from __future__ import annotations

import shlex

import pytest

from rlsched import __version__
from rlsched.cli import EXAMPLES, build_parser, main
from rlsched.commands import COMMANDS


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"rlsched {__version__}"


def test_the_package_version_is_the_distribution_version() -> None:
    from importlib.metadata import version

    assert version("rlsched") == __version__


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_subcommand_has_examples_that_parse(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert EXAMPLES.get(name), f"rlsched {name}: no examples in rlsched.cli.EXAMPLES"
    for example in EXAMPLES[name]:
        argv = shlex.split(example)
        assert argv[:2] == ["rlsched", name], example
        args = build_parser().parse_args(argv[1:])
        assert args.command == name
    with pytest.raises(SystemExit):
        main([name, "--help"])
    help_text = capsys.readouterr().out
    assert "examples:" in help_text and all(f"  {e}" in help_text for e in EXAMPLES[name])


@pytest.mark.parametrize("name", list(COMMANDS))
def test_defaults_are_printed_once(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    import re

    with pytest.raises(SystemExit):
        main([name, "--help"])
    for option in re.split(r"\n  (?=-)", capsys.readouterr().out):
        assert not re.search(r"\(default[^)]*\)\s*\(default", option), option  # said, then appended
        assert "(default: None)" not in option and "(default: )" not in option, option


def test_help_lists_what_the_registries_hold(capsys: pytest.CaptureFixture[str]) -> None:
    from rlsched.bench import MODULES
    from rlsched.policies import policy_names

    for argv, names in ((["simulate", "--help"], policy_names()), (["bench", "--help"], list(MODULES))):
        with pytest.raises(SystemExit):
            main(argv)
        text = " ".join(capsys.readouterr().out.split())
        assert all(n in text for n in names), (argv, [n for n in names if n not in text])
