"""Each bound type of the scenario schema is named once, as an alias the type checker reads (issue 49),
and the alias is the same pydantic type ``number(bound)`` builds at run time."""

from __future__ import annotations

import math
import typing

import pytest
from pydantic import TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from rlsched import bounds
from rlsched.sim import schema


def _bound_aliases() -> dict[str, tuple[type, FieldInfo]]:
    out = {}
    for name, value in vars(schema).items():
        args = typing.get_args(value) if typing.get_origin(value) is typing.Annotated else ()
        infos = [a for a in args[1:] if isinstance(a, FieldInfo)]
        if infos and schema.NOT_A_BOOL in args:
            out[name] = (args[0], infos[0])
    return out


def test_the_schema_names_its_bound_types() -> None:
    assert {"Millis", "NumSeqs", "Replicas", "TruthScale", "StepTime", "GpuGb", "Seed"} <= set(_bound_aliases())


@pytest.mark.parametrize("name", sorted(_bound_aliases()))
def test_an_alias_s_kind_agrees_with_its_bound(name: str) -> None:
    """A float alias over ``within`` of an integer bound would take 2.5 replicas; an int alias of a float
    bound would refuse 0.5 s: the alias's kind and its ``within`` agree (finite floats, whole ints)."""
    kind, info = _bound_aliases()[name]
    finite = [m for m in info.metadata if getattr(m, "allow_inf_nan", None) is False]
    assert kind in (int, float) and bool(finite) == (kind is float), name
    adapter = TypeAdapter(getattr(schema, name))
    with pytest.raises(ValidationError, match="boolean"):
        adapter.validate_python(True)
    if kind is float:
        with pytest.raises(ValidationError):
            adapter.validate_python(math.inf)


def test_number_builds_the_type_an_alias_names() -> None:
    built, named = (TypeAdapter(t) for t in (schema.number(bounds.REPLICAS), schema.Replicas))
    for value in (1, 1024, 0, 1025, 2.5, True, "2"):
        outcome = []
        for adapter in (built, named):
            try:
                outcome.append(adapter.validate_python(value))
            except ValidationError as e:
                outcome.append([err["type"] for err in e.errors()])
        assert outcome[0] == outcome[1], value
    assert typing.get_args(typing.get_args(schema.SpDegree)[0]) == bounds.SP_DEGREE.values
