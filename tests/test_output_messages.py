"""Each output-path and list-flag message of docs/errors.md (``rlsched.atomic``, ``commands.args``,
``argtypes.int_list``), triggered by the path or text that earns it and naming the flag
(``tests/test_errors_doc.py`` checks every message has such a test)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlsched.argtypes import int_list
from rlsched.atomic import atomic_open, check_output, check_output_folder, stream_open
from rlsched.commands.args import check_out_file
from rlsched.errors import ConfigError, OutputPathError


def test_a_link_where_a_file_belongs(tmp_path: Path) -> None:
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(OutputPathError, match="--out: ") as err:
        check_output(link, "--out")
    assert "rlsched does not write through links: name the file itself" in str(err.value)


def test_a_link_where_a_folder_belongs(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    link = tmp_path / "ck"
    link.symlink_to(tmp_path / "real")
    with pytest.raises(OutputPathError, match="--save: ") as err:
        check_output_folder(link, "--save")
    assert "rlsched replaces this folder whole and does not replace links: name the folder itself" in str(err.value)


def test_a_named_pipe_where_a_file_belongs(tmp_path: Path) -> None:
    fifo = tmp_path / "out.csv"
    os.mkfifo(fifo)
    with pytest.raises(OutputPathError) as err:
        check_output(fifo, "--records")
    assert "is a named pipe (FIFO), not a regular file; rlsched writes only regular files" in str(err.value)
    with pytest.raises(OutputPathError) as err:  # the same from the writer (a pipe put there since the check)
        with atomic_open(fifo, "w", flag="--records"):
            pass
    assert "not a regular file; rlsched writes only regular files" in str(err.value)


def test_a_stream_that_cannot_be_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipe put there after the path was checked (the check stubbed out): opening it to write
    without a reader fails (ENXIO), named with its flag."""
    import rlsched.atomic as atomic

    fifo = tmp_path / "log.jsonl"
    os.mkfifo(fifo)
    monkeypatch.setattr(atomic, "check_output", lambda path, flag=None: Path(path))
    with pytest.raises(OutputPathError, match="--log") as err:
        stream_open(fifo, "w", flag="--log")
    assert "cannot be opened for writing" in str(err.value)


def test_an_output_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="--out") as err:
        check_out_file(tmp_path / "f" / "out.json", "--out")
    assert "is a file, not a folder" in str(err.value)
    with pytest.raises(ConfigError, match="--out") as err:
        check_out_file(tmp_path / "f" / "a" / "out.json", "--out", make_parents=True)
    assert "is a file, not a folder" in str(err.value)


@pytest.mark.parametrize("text, message", [
    ("1,x", "expected comma-separated integers, not '1,x'"),
    ("1,-2", "each value must be an integer >= 0"),
])
def test_a_bad_integer_list_names_its_flag(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match="--seeds") as err:
        int_list(text, "--seeds")
    assert message in str(err.value)
