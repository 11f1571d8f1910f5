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
