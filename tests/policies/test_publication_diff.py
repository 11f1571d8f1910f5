"""The publication diff (``rlsched.routing.publication``): when a replica publishes a new state and what it
lists since the last one, the rule the simulator's ``ViewRouter`` and the plugin's scheduler share."""

from __future__ import annotations

from rlsched.routing.publication import PublicationDiff


def never(rid: str) -> int | None:
    raise AssertionError(f"{rid} did not leave the batch")


def test_the_first_batch_is_published_and_the_same_set_is_not() -> None:
    pub: PublicationDiff[str] = PublicationDiff()
    first = pub.take(("a", "b"), never)
    assert first is not None and first.running == ("a", "b") and first.changed
    assert first.finished == () and first.preempted == ()
    assert pub.take(("b", "a"), never) is None  # the same set, steps made: no news
    assert pub.running == ("a", "b")


def test_a_finish_is_news_once() -> None:
    pub: PublicationDiff[str] = PublicationDiff()
    pub.take(("a",), never)
    pub.finish("z")
    diff = pub.take(("a",), never)
    assert diff is not None and diff.finished == ("z",) and not diff.changed
    assert pub.take(("a",), never) is None


def test_who_left_the_batch_is_preempted_or_finished_as_left_says() -> None:
    pub: PublicationDiff[str] = PublicationDiff()
    pub.take(("a", "b", "c"), never)
    pub.finish("b")

    def left(rid: str) -> int | None:
        if rid == "c":  # an abort the replica learns of only now
            pub.finish(rid)
            return None
        return {"a": 7}.get(rid)

    diff = pub.take(("d",), left)
    assert diff is not None and diff.changed
    assert diff.running == ("d",) and diff.preempted == (("a", 7),) and diff.finished == ("b", "c")


def test_force_publishes_without_news() -> None:
    pub: PublicationDiff[int] = PublicationDiff()
    pub.take((1,), never)
    assert pub.take((1,), never) is None
    forced = pub.take((1,), never, force=True)
    assert forced is not None and forced.running == (1,) and not forced.changed
