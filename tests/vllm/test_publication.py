"""Issue 49: the replica-state publication diff is defined once (``rlsched.routing.publication``), and the
plugin's scheduler (through ``publish.Publication``) and the simulator's ``ViewRouter`` both call it."""

from __future__ import annotations

import os
from typing import Any

import pytest

pytestmark = pytest.mark.vllm

if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from rlsched.integrations.vllm_omni import publish  # noqa: E402
from rlsched.policies import make_policy  # noqa: E402
from rlsched.routing import publication, views  # noqa: E402
from rlsched.routing.routers import RlschedRouter  # noqa: E402
from rlsched.sim.stage import Stage  # noqa: E402
from tests.sim.test_stage import replicas, workload  # noqa: E402
from tests.vllm.fakes import finish_wave, mk_req, plugin  # noqa: E402


def test_the_plugin_and_the_simulator_call_the_same_publication_diff(monkeypatch: pytest.MonkeyPatch) -> None:
    assert publish.PublicationDiff is publication.PublicationDiff is views.PublicationDiff
    callers: list[Any] = []
    take = publication.PublicationDiff.take

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        callers.append(self)
        return take(self, *args, **kwargs)

    monkeypatch.setattr(publication.PublicationDiff, "take", spy)
    sched = plugin("fifo", publish_state=True)
    sched.add_request(mk_req("A"))
    finish_wave(sched, sched.schedule())
    assert callers and all(c is sched.publication.diff for c in callers)
    assert sched.publisher.latest.finished == ("A",)  # the diff's news, published
    callers.clear()
    router = views.ViewRouter(RlschedRouter(), "engine")
    Stage(workload(20, rate=1.5), replicas(2), seed=3).run([make_policy("fifo") for _ in range(2)], router)
    assert callers and {id(c) for c in callers} <= {id(d) for d in router._diffs}
