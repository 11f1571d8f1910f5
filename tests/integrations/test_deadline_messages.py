"""Each decision-deadline message of docs/errors.md (the plugin's runners), triggered by a decision that
earns it (``tests/test_errors_doc.py`` checks every message has such a test)."""

from __future__ import annotations

import time

import pytest

from rlsched.integrations.vllm_omni.deadline import DeadlineRunner, DecisionTimeout, InlineRunner, PolicyAbort


def _exit(_: object) -> None:
    raise GeneratorExit("stop")


def test_a_worker_decision_past_its_deadline_then_while_it_still_runs() -> None:
    runner = DeadlineRunner(0.05)
    try:
        with pytest.raises(DecisionTimeout, match="no decision within 50 ms"):
            runner.call(lambda _: time.sleep(0.5), None)
        with pytest.raises(DecisionTimeout, match="an earlier decision overran its deadline and is still running"):
            runner.call(lambda _: 1, None)
    finally:
        runner.close()


@pytest.mark.parametrize("runner_type", [DeadlineRunner, InlineRunner])
def test_a_decision_that_raises_a_non_exception_is_a_policy_abort(runner_type: type) -> None:
    runner = runner_type(1.0)
    try:
        with pytest.raises(PolicyAbort, match="decide raised GeneratorExit"):
            runner.call(_exit, None)
    finally:
        runner.close()
