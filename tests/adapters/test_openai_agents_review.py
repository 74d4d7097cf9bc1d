"""The OpenAI Agents SDK adapter (openai-agents 0.24.0), an effect in doubt that an operator
must decide (a review item is open): the SDK's own interruption, as for an approval. The end
user's `state.approve` (once the operator has decided) goes on with the decision; answered
before anyone decided, the model is told the outcome is not known yet (the SDK asks
`needs_approval` only once per call, so the run cannot stop again); `state.reject` does not
cancel an effect that may have happened. Real SDK, scripted model, the stage's ledger."""

from __future__ import annotations

from typing import Any

import pytest
from agents import Runner, ToolApprovalItem
from ledger_client.adapters.openai_agents import approval_of, ledger_run

from ledger.models import Reason
from ledger.rules.reviewqueue import open_review
from tests.adapters import test_openai_agents
from tests.adapters.agents.openai_agents_shop import (
    NO_TRACING,
    Call,
    ScriptedModel,
    make_tools,
    outputs,
    shop_agent,
)

pytestmark = pytest.mark.django_db(transaction=True)

# This process as an agent of the stage, as in the SDK adapter's main tests.
on_stage = test_openai_agents.on_stage

PAY = Call("charge_card", {"amount": "25.00", "currency": "EUR", "account": "acct_1"}, "call_pay")


def _run(agent: Any, first: Any) -> Any:
    with ledger_run("order-r"):
        return Runner.run_sync(agent, first, run_config=NO_TRACING)


def _in_review(stage: Any, monkeypatch: pytest.MonkeyPatch, **tool_options: Any) -> Any:
    """A charge whose answer was lost (the provider unreachable: `unknown`), then a review
    item opened for it, as when recovery could not tell; and the agent that made it."""
    agent = shop_agent(ScriptedModel([PAY]), make_tools(**tool_options))
    monkeypatch.setenv("SANDBOX_PAYMENTS_URL", "http://127.0.0.1:9")
    _run(agent, "Pay the invoice.")
    monkeypatch.setenv("SANDBOX_PAYMENTS_URL", stage.payments.url)
    [effect] = stage.effects()
    assert effect.status == "unknown"
    open_review(effect.id, Reason.INCONCLUSIVE)  # a person decides: waiting would not help
    return agent, effect


def _interrupted(agent: Any, effect: Any) -> Any:
    """The same call again (the run done again): the SDK's interruption names the effect."""
    result = _run(agent, "Pay the invoice.")
    [item] = result.interruptions
    assert isinstance(item, ToolApprovalItem) and item.name == "charge_card"
    shown = approval_of(item, "order-r")
    assert shown is not None and (shown.effect_id, shown.status) == (str(effect.id), "unknown")
    return result


def _answer(agent: Any, result: Any, how: str) -> Any:
    state = result.to_state()
    getattr(state, how)(result.interruptions[0])
    return _run(agent, state)


def test_an_effect_an_operator_must_decide_interrupts_the_run_and_goes_on_with_their_decision(
    on_stage, monkeypatch
):
    agent, effect = _in_review(on_stage, monkeypatch, operator_wait=5)
    result = _interrupted(agent, effect)
    assert on_stage.charges() == []
    # The operator finds it never reached the provider and retries it; the user approves.
    on_stage._decide(effect.id, "retry")
    done = _answer(agent, result, "approve")
    [charge] = on_stage.charges()
    assert charge["id"] in str(outputs(done)["call_pay"])
    assert [e.status for e in on_stage.effects()] == ["confirmed"]


def test_approved_before_anyone_decided_the_model_is_told_not_known_yet(on_stage, monkeypatch):
    agent, effect = _in_review(on_stage, monkeypatch, operator_wait=1)
    result = _interrupted(agent, effect)
    done = _answer(agent, result, "approve")
    assert "may already have taken place" in str(outputs(done)["call_pay"])
    assert on_stage.charges() == []
    assert [e.status for e in on_stage.effects()] == ["unknown"]


def test_the_users_rejection_leaves_an_effect_in_doubt_to_the_operator(on_stage, monkeypatch):
    agent, effect = _in_review(on_stage, monkeypatch)
    _answer(agent, _interrupted(agent, effect), "reject")
    assert on_stage.charges() == []
    assert [e.status for e in on_stage.effects()] == ["unknown"]  # not cancelled


def test_without_pausing_for_review_the_model_is_told_not_known_yet(on_stage, monkeypatch):
    agent, _ = _in_review(on_stage, monkeypatch, pause_for_review=False)
    result = _run(agent, "Pay the invoice.")
    assert result.interruptions == []
    assert "may already have taken place" in str(outputs(result)["call_pay"])
    assert on_stage.charges() == []
