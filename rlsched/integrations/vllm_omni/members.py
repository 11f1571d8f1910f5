"""vLLM-Omni's replica membership with a version: what lets the router pool follow the live replicas in
O(1) a decision.

``StagePool`` (vLLM-Omni 0.30) keeps a stage's replicas in two containers: ``clients`` (a slot is ``None``
once its replica left: ``remove_client``, ``evict_replica``; ``add_client`` fills or appends one) and
``_unavailable_replicas`` (``mark_replica_unavailable`` adds, ``add_client`` discards). Reading which
replicas are live and available visits every slot (``live_replica_ids``, ``is_replica_available``); the
pool did that at every decision, ~0.2 ms at 1,024 replicas. ``LedgerStagePool`` holds both in a
``MemberList`` and a ``MemberSet`` sharing one ``Version``, bumped after every change whoever makes it
(vLLM-Omni's own methods included), so a decision re-reads the membership only after it changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


class Version:
    """A counter bumped after every change of the containers that share it."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


class MemberList(list[Any]):
    """A ``list`` that bumps ``version`` after each change (reads are the list's own)."""

    def __init__(self, items: Iterable[Any] = (), version: Version | None = None) -> None:
        super().__init__(items)
        self.version = version or Version()


class MemberSet(set[Any]):
    """A ``set`` that bumps ``version`` after each change (reads are the set's own)."""

    def __init__(self, items: Iterable[Any] = (), version: Version | None = None) -> None:
        super().__init__(items)
        self.version = version or Version()


def _bumping(method: Callable[..., Any]) -> Callable[..., Any]:
    def changed(self: Any, *args: Any, **kw: Any) -> Any:
        try:
            return method(self, *args, **kw)
        finally:  # after the change: a reader that saw the old version reads again
            self.version.n += 1
    changed.__name__ = changed.__qualname__ = method.__name__
    return changed


LIST_CHANGES = ("__setitem__", "__delitem__", "__iadd__", "__imul__", "append", "extend", "insert", "pop", "remove",
                "clear", "sort", "reverse")
SET_CHANGES = ("add", "discard", "remove", "pop", "clear", "update", "difference_update", "intersection_update",
               "symmetric_difference_update", "__ior__", "__iand__", "__isub__", "__ixor__")
for _name in LIST_CHANGES:
    setattr(MemberList, _name, _bumping(getattr(list, _name)))
for _name in SET_CHANGES:
    setattr(MemberSet, _name, _bumping(getattr(set, _name)))

__all__ = ["LIST_CHANGES", "MemberList", "MemberSet", "SET_CHANGES", "Version"]
