"""``QueueOrder``: positions in vLLM-Omni's waiting deque by bisection, always the right ones."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsched.integrations.vllm_omni.order import QueueOrder

# what vLLM-Omni and the plugin do to the deque: arrive, preempt (push to the head), admit from
# the head, finish a waiting id (the deque rebuilt without it), move chosen ids to the head
OPS = st.lists(st.tuples(st.sampled_from(["arrive", "preempt", "admit", "finish", "move", "unseen"]),
                         st.integers(0, 10**6), st.integers(1, 4)), max_size=120)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_move_to_head_is_remove_then_extendleft(ops: list[tuple[str, int, int]]) -> None:
    """Against the plain ``remove`` + ``extendleft`` on a copy: the same deque after every
    operation, an insertion the order never saw (``unseen``) included."""
    order, waiting, ref, running, n = QueueOrder(), deque[str](), deque[str](), [], 0
    for op, pick, k in ops:
        if op in ("arrive", "unseen"):
            rid, n = f"R{n}", n + 1
            waiting.append(rid)
            ref.append(rid)
            if op == "arrive":
                order.appended(rid)
        elif op == "preempt" and running:
            rid = running.pop(pick % len(running))
            waiting.appendleft(rid)
            ref.appendleft(rid)
            order.pushed_front(rid)
        elif op == "admit" and waiting:
            running.append(waiting.popleft())
            ref.popleft()
        elif op == "finish" and waiting:
            gone = waiting[pick % len(waiting)]
            waiting = deque(r for r in waiting if r != gone)  # as vLLM-Omni's _finish_requests
            ref = deque(r for r in ref if r != gone)
            order.forget(gone)
        elif op == "move" and waiting:
            chosen = list(dict.fromkeys(waiting[(pick + 7 * i) % len(waiting)] for i in range(k)))
            order.move_to_head(waiting, chosen)
            for rid in chosen:
                ref.remove(rid)
            ref.extendleft(reversed(chosen))
        assert waiting == ref


class NoScan(deque[str]):
    """A deque whose linear scan fails the test: positions must come from the ranks."""

    def index(self, *args: object) -> int:
        raise AssertionError("scanned the deque")


def test_index_bisects_without_a_scan() -> None:
    order, waiting = QueueOrder(), NoScan()
    for i in range(50):
        waiting.append(f"R{i}")
        order.appended(f"R{i}")
    order.move_to_head(waiting, ["R30", "R7"])
    waiting.popleft()
    waiting.appendleft("R30")
    order.pushed_front("R30")
    assert list(waiting)[:3] == ["R30", "R7", "R0"]
    assert [order.index(waiting, rid) for rid in waiting] == list(range(50))


def test_index_of_an_absent_id_raises_as_deque_index() -> None:
    order, waiting = QueueOrder(), deque(["a", "b"])
    order.appended("a")
    order.appended("b")
    with pytest.raises(ValueError):
        order.index(waiting, "c")
