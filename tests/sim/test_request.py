import math

import pytest

from rlsched.errors import InvalidRequest
from tests.conftest import make_request


@pytest.mark.parametrize("field,value", [
    ("height", 0), ("width", -16), ("num_frames", 0), ("num_inference_steps", 0),
    ("num_inference_steps", 2.5), ("priority", "urgent"), ("modality", "3d"),
    ("slo_s", math.nan), ("slo_s", 0.0), ("arrival_s", math.nan), ("arrival_s", -1.0),
])
def test_invalid_field_is_named(field: str, value: object) -> None:
    kw = {"height": 512, "width": 512}
    with pytest.raises(InvalidRequest) as err:
        if field in ("priority",):
            make_request(priority=value)
        elif field == "slo_s":
            make_request(slo=value)
        elif field == "arrival_s":
            make_request(t=value)
        elif field == "num_inference_steps":
            make_request(steps=value)
        else:
            make_request(**{**kw, field: value})
    assert err.value.field == field
    assert field in str(err.value)


def test_step_key_omits_steps() -> None:
    a, b = make_request(0, steps=20), make_request(1, steps=50)
    assert a.key() != b.key()
    assert a.key(step_mode=True) == b.key(step_mode=True)
    assert make_request(2, size=1024).key(True) != a.key(True)
    assert make_request(3, cfg=False).key() != a.key()
