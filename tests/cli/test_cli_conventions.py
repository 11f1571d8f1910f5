"""The command line's conventions: ``--version``, and an examples epilog on every subcommand whose
every example parses (a renamed flag fails here, not in a user's terminal)."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

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


RENAMED = [(["simulate", "--rate-scale", "1.25", "--duration", "600", "--json"], "--rate-scale", "--load"),
           (["eval", "--rate-scales", "1.0", "--scenarios", "default", "--policies", "fifo", "--seeds", "1000",
             "--duration", "300", "--json"], "--rate-scales", "--loads"),
           (["label", "--rate-scales", "2,1", "--out", "OUT/l.npz"], "--rate-scales", "--load-range")]


@pytest.mark.parametrize(("argv", "old", "new"), RENAMED, ids=[r[1] + "->" + r[2] for r in RENAMED])
def test_an_old_spelling_still_works_with_a_note(argv: list[str], old: str, new: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    argv = [a.replace("OUT", str(tmp_path)) for a in argv]
    if argv[0] == "eval":
        argv += ["--out", str(tmp_path / "e")]
    old_status = main(argv)
    old_out = capsys.readouterr()
    assert f"rlsched: note: {old} is renamed {new} (the old name goes in the next release)" in old_out.err
    assert main([new if a == old else a for a in argv]) == old_status  # the same run under the new name
    new_out = capsys.readouterr()
    assert "is renamed" not in new_out.err
    if argv[0] == "simulate":
        assert json.loads(old_out.out)["rate_scale"] == json.loads(new_out.out)["rate_scale"] == 1.25


def test_one_name_per_concept() -> None:
    """A load multiplier is --load (one) / --loads (a list) / --load-range; scenarios in a list are
    --scenarios; loadgen's connections are --connections (--workers is processes everywhere)."""
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    shown = {name: {s for a in sub._actions if a.help != argparse.SUPPRESS for s in a.option_strings}
             for name, sub in subs.items()}
    assert not any({"--rate-scale", "--rate-scales"} & flags for flags in shown.values()), shown
    assert "--scenarios" in shown["train"] and "--connections" in shown["loadgen"]
    assert "--workers" not in shown["loadgen"]


REPORTING = ["simulate", "eval", "tune", "plan", "label", "learn", "train", "export", "deploy", "loadgen", "bench"]


def test_every_reporting_command_has_json() -> None:
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert [name for name in REPORTING if "--json" not in subs[name]._option_string_actions] == []


def test_json_only_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """deploy and label print lines for a person, and one JSON object with --json."""
    deploy = ["deploy", "--policy", "edf", "--out", str(tmp_path / "d.yaml")]
    label = ["label", "--scenarios", "default", "--episodes", "1", "--duration", "600", "--every", "8",
             "--no-progress", "--out", str(tmp_path / "l.npz")]
    for argv in (deploy, label):
        assert main(argv) == 0
        text = capsys.readouterr().out
        assert text.startswith("wrote ") and not text.lstrip().startswith("{")
        (tmp_path / "d.yaml").unlink(missing_ok=True)
        (tmp_path / "l.npz").unlink(missing_ok=True)
        assert main([*argv, "--json"]) == 0
        assert isinstance(json.loads(capsys.readouterr().out), dict)


def test_deploy_takes_vllm_omnis_name_for_the_admission_wait(tmp_path: Path) -> None:
    import yaml

    out = tmp_path / "d.yaml"
    assert main(["deploy", "--policy", "edf", "--request-batch-max-wait-ms", "25", "--out", str(out)]) == 0
    stage = yaml.safe_load(out.read_text())["stages"][0]
    assert stage["request_batch_max_wait_ms"] == 25


@pytest.mark.parametrize("name", list(COMMANDS))
def test_paths_in_the_help_exist(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A shipped path a --help names (checkpoints/…, agents/…, envs/…) is there ({scenario}: default)."""
    import re

    from rlsched.resources import shipped_path

    with pytest.raises(SystemExit):
        main([name, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    paths = re.findall(r"(?<![\w/.])((?:checkpoints|agents|envs)/[\w./{}-]*\w)", text)
    paths += re.findall(r"\b(?:static|rl|pick):([\w./{}-]*\w)", text)  # a policy spec's file or folder
    for path in paths:
        if any(s in path for s in ("NAME", "SCENARIO", "FILE", "PATH", "DIR", "mine", "my-")):  # placeholders, outputs
            continue
        assert shipped_path(path.replace("{scenario}", "default")).exists(), f"rlsched {name} --help: {path}"
