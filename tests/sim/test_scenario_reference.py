"""The scenario file reference in docs/workload.md is generated from the schema, up to date, and lists
every key the schema has (walked here independently of the generator), every arrival process and the
``--trace`` columns the reader accepts (issue 48)."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel

from rlsched.sim import reference, schema, workload

PAGE = Path(__file__).resolve().parents[2] / "docs" / "workload.md"


def _section() -> str:
    text = PAGE.read_text(encoding="utf-8")
    start, end = text.index(reference.BEGIN), text.index(reference.END) + len(reference.END)
    return text[start:end]


def _schema_keys(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every key path under ``model``: a list's entries as ``[i]``, a mapping's values as ``.NAME``."""
    for name, field in model.model_fields.items():
        key = f"{prefix}.{name}" if prefix else name
        yield key
        for sub, suffix in _nested(field.annotation):
            yield from _schema_keys(sub, key + suffix)


def _nested(annotation: typing.Any, suffix: str = "") -> Iterator[tuple[type[BaseModel], str]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation, suffix
        return
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is tuple:
        yield from _nested(args[0], suffix + "[i]")
    elif origin is dict:
        yield from _nested(args[1], suffix + ".NAME")
    else:  # Optional, a union, Annotated
        for arg in args:
            yield from _nested(arg, suffix)


def test_the_page_holds_the_generated_reference() -> None:
    """Run ``python -m rlsched.sim.reference --write docs/workload.md`` after changing the schema."""
    assert _section() == reference.reference()


def test_every_key_of_the_schema_is_listed() -> None:
    listed = set(re.findall(r"^\| `([^`]+)` \|", _section(), flags=re.MULTILINE))
    keys = set(_schema_keys(schema.ScenarioFile)) - {"arrival.process"}  # the process is its table's heading
    assert keys - listed == set(), f"keys of the schema missing from the reference: {sorted(keys - listed)}"
    assert listed - keys == set()
    assert keys <= reference.keys()


def test_every_arrival_process_has_its_table() -> None:
    headings = set(re.findall(r"`(\w+)`", " ".join(re.findall(r"^#### (.+)$", _section(), flags=re.MULTILINE))))
    assert headings == set(schema.ARRIVAL_TAGS) >= set(workload.ARRIVAL_PROCESSES)
    assert "`arrival.amplitude`" in _section() and "`arrival.period_s`" in _section()  # diurnal's, once code only


def test_the_trace_columns_are_the_readers() -> None:
    """The page's prose names the columns the reader requires and accepts (it said ``slo_ms`` and a
    required ``cfg`` before; the reader wants ``slo_s``, and ``cfg`` is optional)."""
    text = PAGE.read_text(encoding="utf-8")
    assert f"header `{','.join(workload.RLSCHED_CSV_REQUIRED)}`" in text
    assert f"optional columns `{','.join(workload.RLSCHED_CSV_OPTIONAL)}`" in text
    assert "slo_ms" not in text
