"""The change journal: a bounded window over an unbounded list of changes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsched.sim.view import DEQUEUED, ENGINE_KEEP, ENQUEUED, Journal


@settings(max_examples=200, deadline=None, derandomize=True)
@given(keep=st.integers(1, 12), ops=st.lists(st.sampled_from([ENQUEUED, DEQUEUED]), max_size=60),
       cursors=st.lists(st.integers(-3, 70), max_size=20))
def test_since_is_the_tail_of_every_change_or_none(keep: int, ops: list[int], cursors: list[int]) -> None:
    """``since(c)`` is every change from ``c`` on, oldest first, while they are all kept; None once one
    was dropped or for a cursor this journal never had; memory stays at ``keep`` entries."""
    journal, everything = Journal(keep), []
    for n, op in enumerate(ops):
        rec = object()  # the journal does not look inside a record
        journal.append(op, rec)  # type: ignore[arg-type]
        everything.append((op, rec))
        assert journal.end == n + 1 and len(journal) == min(n + 1, keep)
        for c in cursors:
            got = journal.since(c)
            if c > journal.end or c < 0 or journal.end - c > keep:
                assert got is None
            else:
                assert list(got) == everything[c:]
    assert list(journal) == everything[-keep:]


def test_a_journal_keeps_at_least_one_entry() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Journal(0)
    assert Journal().keep == 1 << 16 and Journal(ENGINE_KEEP).keep == ENGINE_KEEP
