"""The LangChain / LangGraph adapter (langchain 1.5.2, langgraph 1.2.24), with the real
`create_agent`, `ToolNode`, checkpointers and stores and a scripted chat model, against the
real ledger and the sandbox providers (`stage`).

- a SIGKILL between the provider's charge and the recorded outcome: the second process resumes
  the thread from its SQLite checkpoint, and the sandbox holds one charge;
- four-eyes: the ledger's hold is LangGraph's `interrupt()`; only an operator's decision in the
  ledger lets the charge happen; the end user's "approve" alone charges nothing, their
  "reject" cancels the effect;
- parallel tool calls in one model turn with an unguarded sibling: no tool body runs twice
  across the interrupt and the resume, in create_agent (a task per call) and in a plain
  ToolNode (one task for all, the sibling's result remembered in the graph's store);
- `invoke` and `ainvoke`, sync and async tool functions;
- the tool schemas LangChain builds are the same with and without `@guarded`;
- bad input (arguments without a canonical form, no thread_id, a ledger that does not answer)
  raises before anything is written or run.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import ledger_client.config
import pytest
from django.db import connection
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, ToolRuntime, tools_condition
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command
from ledger_client import LedgerUnavailable, guarded
from ledger_client.adapters.langgraph import LedgerMiddleware

from ledger.models import Reason, Tool
from ledger.rules.reviewqueue import open_review
from tests.adapters.agents import langgraph_agent as lg
from tests.adapters.agents.langgraph_model import ScriptedModel, calls

AGENT = Path(__file__).resolve().parent / "agents" / "langgraph_agent.py"
SYNC_ASYNC = pytest.mark.parametrize("runner", ["invoke", "ainvoke"])


@pytest.fixture
def on_stage(stage: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """This process as an agent of the stage: the ledger configured, the sandboxes in the env."""
    monkeypatch.setattr(ledger_client.config, "_default", None)
    ledger_client.configure(stage.url, stage.key, owner="langgraph-test", retries=1)
    monkeypatch.setenv("SANDBOX_PAYMENTS_URL", stage.payments.url)
    monkeypatch.setenv("SANDBOX_MESSAGING_URL", stage.messaging.url)
    lg.CALLS.clear()
    yield stage


def run(graph: Any, runner: str, value: Any, thread: str = "thread-1") -> dict[str, Any]:
    config = {"configurable": {"thread_id": thread}}
    if runner == "invoke":
        result: dict[str, Any] = graph.invoke(value, config, durability="sync")
    else:
        result = asyncio.run(graph.ainvoke(value, config, durability="sync"))
    return result


def charge_tool(runner: str) -> BaseTool:
    return lg.charge_card if runner == "invoke" else lg.charge_card_async


def note_tool(runner: str) -> BaseTool:
    return lg.note if runner == "invoke" else lg.note_async


def pause_of(result: dict[str, Any]) -> dict[str, Any]:
    (pause,) = result["__interrupt__"]
    value: dict[str, Any] = pause.value
    return value


# --- A crash between the provider's charge and the recorded outcome ---------------------------


def test_sigkill_after_the_charge_resumes_from_the_checkpoint_with_one_charge(stage, tmp_path):
    checkpoints = str(tmp_path / "checkpoints.sqlite")
    args = (checkpoints, "order-7", "25.00")
    died = stage.run_python(AGENT, "start", *args, LG_CRASH_AFTER_CHARGE="1")
    assert died.returncode == -signal.SIGKILL, died.stderr
    assert "CHARGING" in died.stdout
    (effect,) = stage.effects("charge_card")
    # Keyed by its position in the run (the model's first turn), not by the model's call id.
    assert (effect.status, effect.run_id) == ("dispatching", "order-7")
    assert effect.step_id == "tools/turn-1" and effect.effect_key.startswith(
        "order-7:tools/turn-1:r"
    )
    assert len(stage.charges()) == 1

    assert stage.settle(effect.id).status == "confirmed"  # the sweep: lease out, lookup
    resumed = stage.run_python(AGENT, "resume", *args)
    assert resumed.returncode == 0, resumed.stderr
    assert "CHARGING" not in resumed.stdout  # the tool body did not run again
    (line,) = [json.loads(x[5:]) for x in resumed.stdout.splitlines() if x.startswith("TOOL ")]
    charge = stage.charges()
    assert len(charge) == 1
    assert line["status"] == "success" and charge[0]["id"] in line["content"]


# --- Four-eyes: the ledger's hold is LangGraph's interrupt -------------------------------------


@SYNC_ASYNC
def test_hold_interrupts_and_only_an_operator_approval_charges_once(on_stage, runner):
    on_stage.hold_above("100.00")
    graph = lg.agent(
        [calls(lg.pay("call_big", "250.00"))], [charge_tool(runner)], checkpointer=InMemorySaver()
    )
    pause = pause_of(run(graph, runner, lg.USER))
    (effect,) = on_stage.effects("charge_card")
    assert pause["effect_id"] == str(effect.id) and effect.status == "awaiting_approval"
    assert (pause["tool"], pause["target"]) == ("charge_card", "acct_1")
    assert (pause["amount"], pause["currency"], pause["tool_call_id"]) == (
        "250.00",
        "EUR",
        "call_big",
    )
    assert on_stage.charges() == [] and lg.CALLS["charge_card"] == 0

    on_stage.approve(effect.id)
    result = run(graph, runner, Command(resume="approve"))
    assert "__interrupt__" not in result
    (charge,) = on_stage.charges()
    message = lg.tool_messages(result)["call_big"]
    assert message.status == "success" and charge["id"] in message.content
    assert lg.CALLS["charge_card"] == 1
    assert on_stage.effects("charge_card")[0].status == "confirmed"


def test_the_end_users_approval_alone_charges_nothing(on_stage):
    on_stage.hold_above("100.00")
    graph = lg.agent(
        [calls(lg.pay("call_big", "250.00"))],
        [lg.charge_card],
        checkpointer=InMemorySaver(),
        approval_wait=1,
    )
    first = pause_of(run(graph, "invoke", lg.USER))
    again = pause_of(run(graph, "invoke", Command(resume="approve")))
    # The operator has not decided: the graph pauses again, for the same effect.
    assert again["effect_id"] == first["effect_id"]
    assert "not decided" in again["message"]
    assert on_stage.charges() == [] and lg.CALLS["charge_card"] == 0
    assert on_stage.effects("charge_card")[0].status == "awaiting_approval"

    on_stage.reject(first["effect_id"])
    result = run(graph, "invoke", Command(resume={"decision": "approve"}))
    message = lg.tool_messages(result)["call_big"]
    assert message.status == "error" and "rejected by an operator" in message.content
    assert "Do not retry" in message.content
    assert on_stage.charges() == [] and lg.CALLS["charge_card"] == 0
    assert on_stage.effects("charge_card")[0].status == "cancelled"


def decide_later(stage: Any, effect_id: str, decision: str, after: float) -> threading.Thread:
    """An operator deciding in the ledger while the graph waits for it."""

    def later() -> None:
        time.sleep(after)
        try:
            getattr(stage, decision)(effect_id)
        finally:
            connection.close()

    thread = threading.Thread(target=later)
    thread.start()
    return thread


@pytest.mark.parametrize(("decision", "runner"), [("approve", "invoke"), ("reject", "ainvoke")])
def test_the_end_users_approval_waits_for_the_operators_decision(on_stage, decision, runner):
    on_stage.hold_above("100.00")
    graph = lg.agent(
        [calls(lg.pay("call_big", "250.00"))],
        [charge_tool(runner)],
        checkpointer=InMemorySaver(),
        approval_wait=20,
    )
    pause = pause_of(run(graph, runner, lg.USER))
    operator = decide_later(on_stage, pause["effect_id"], decision, after=1.0)
    result = run(graph, runner, Command(resume="approve"))  # waits in the ledger's long poll
    operator.join()
    message = lg.tool_messages(result)["call_big"]
    if decision == "approve":
        (charge,) = on_stage.charges()
        assert message.status == "success" and charge["id"] in message.content
        assert lg.CALLS["charge_card"] == 1
    else:
        assert message.status == "error" and "rejected by an operator" in message.content
        assert on_stage.charges() == [] and lg.CALLS["charge_card"] == 0


@SYNC_ASYNC
def test_the_end_users_rejection_cancels_the_effect(on_stage, runner):
    on_stage.hold_above("100.00")
    graph = lg.agent(
        [calls(lg.pay("call_big", "250.00"))], [charge_tool(runner)], checkpointer=InMemorySaver()
    )
    pause = pause_of(run(graph, runner, lg.USER))
    # An answer naming another effect is not taken for this one: the graph asks again.
    other = {"decision": "reject", "effect_id": "00000000-0000-0000-0000-000000000000"}
    assert pause_of(run(graph, runner, Command(resume=other)))["effect_id"] == pause["effect_id"]
    result = run(graph, runner, Command(resume={"decision": "reject", "reason": "wrong amount"}))
    message = lg.tool_messages(result)["call_big"]
    assert message.status == "error" and "the user rejected" in message.content
    (effect,) = on_stage.effects("charge_card")
    assert effect.status == "cancelled"
    assert on_stage.charges() == [] and lg.CALLS["charge_card"] == 0


def lose_the_answer(
    stage: Any, monkeypatch: pytest.MonkeyPatch, runner: str = "invoke", **middleware: Any
) -> Any:
    """A first run whose charge gets no answer: the guard reports `unknown`."""
    graph = lg.agent(
        [calls(lg.pay("call_pay", "25.00"))],
        [charge_tool(runner)],
        checkpointer=InMemorySaver(),
        **middleware,
    )
    monkeypatch.setenv("SANDBOX_PAYMENTS_URL", "http://127.0.0.1:9")  # the response is lost
    with pytest.raises(httpx.ConnectError):
        run(graph, runner, lg.USER)
    assert stage.effects("charge_card")[0].status == "unknown"
    monkeypatch.setenv("SANDBOX_PAYMENTS_URL", stage.payments.url)
    return graph


def test_a_resumed_call_in_doubt_waits_for_the_ledger_then_runs_once(
    on_stage, monkeypatch, ledger_worker
):
    # A not-found proves absence one second after the call (tools.toml says two minutes).
    Tool.objects.filter(name="charge_card").update(settle_after=timedelta(seconds=1))
    graph = lose_the_answer(on_stage, monkeypatch)
    result = run(graph, "invoke", None)  # LangGraph's own resume, and nothing else
    message = lg.tool_messages(result)["call_pay"]
    (effect,) = on_stage.effects("charge_card")
    (charge,) = on_stage.charges()
    # The ledger looked, found nothing, and let the guard run it again under the same effect.
    assert effect.status == "confirmed" and effect.provider_ref == charge["id"]
    assert message.status == "success" and charge["id"] in message.content
    assert lg.CALLS["charge_card"] == 2  # the lost call, and the one that charged


@SYNC_ASYNC
def test_an_effect_an_operator_must_decide_pauses_the_graph_until_they_have(
    on_stage, monkeypatch, runner
):
    graph = lose_the_answer(on_stage, monkeypatch, runner)
    (effect,) = on_stage.effects("charge_card")
    open_review(effect.id, Reason.INCONCLUSIVE)  # a person decides: waiting would not help
    pause = pause_of(run(graph, runner, None))
    assert (pause["kind"], pause["effect_id"]) == ("effect_ledger.review", str(effect.id))
    assert pause["status"] == "unknown" and pause["tool_call_id"] == "call_pay"
    # Resumed before anyone decided: paused again, and saying so; nothing ran meanwhile.
    again = pause_of(run(graph, runner, Command(resume="go on")))
    assert again["message"].startswith("No operator has decided yet")
    assert on_stage.charges() == [] and sum(lg.CALLS.values()) == 1
    # The operator finds it never reached the provider and retries it: resumed, it runs once.
    on_stage._decide(effect.id, "retry")
    result = run(graph, runner, Command(resume="go on"))
    message = lg.tool_messages(result)["call_pay"]
    (charge,) = on_stage.charges()
    assert message.status == "success" and charge["id"] in message.content
    assert on_stage.effects("charge_card")[0].status == "confirmed"
    assert sum(lg.CALLS.values()) == 2  # the lost call, and the one the operator allowed


def test_without_pausing_for_review_the_model_is_told_not_known_yet(on_stage, monkeypatch):
    graph = lose_the_answer(on_stage, monkeypatch, pause_for_review=False)
    (effect,) = on_stage.effects("charge_card")
    open_review(effect.id, Reason.INCONCLUSIVE)  # a person decides: waiting would not help
    result = run(graph, "invoke", None)
    message = lg.tool_messages(result)["call_pay"]
    assert message.status == "error" and "Outcome not known yet" in message.content
    assert "Do not retry" in message.content and "do not tell the user it failed" in message.content
    assert lg.CALLS["charge_card"] == 1
    assert isinstance(result["messages"][-1], AIMessage)  # the model was told and went on


# --- Parallel tool calls with an unguarded sibling --------------------------------------------


def parallel_turn() -> AIMessage:
    return calls(
        lg.pay("call_big", "250.00"),
        lg.pay("call_small", "25.00", account="acct_2"),
        ("call_note", "note", {"text": "paid"}),
    )


def assert_parallel_run(stage: Any, graph: Any, runner: str) -> None:
    stage.hold_above("100.00")
    pause = pause_of(run(graph, runner, lg.USER))
    assert pause["tool_call_id"] == "call_big"
    assert len(stage.charges()) == 1 and dict(lg.CALLS) == {"charge_card": 1, "note": 1}

    stage.approve(pause["effect_id"])
    result = run(graph, runner, Command(resume="approve"))
    assert len(stage.charges()) == 2
    assert dict(lg.CALLS) == {"charge_card": 2, "note": 1}  # nothing ran twice
    messages = lg.tool_messages(result)
    assert sorted(messages) == ["call_big", "call_note", "call_small"]
    assert all(m.status == "success" for m in messages.values())
    assert len([m for m in result["messages"] if isinstance(m, ToolMessage)]) == 3
    assert sorted(e.status for e in stage.effects("charge_card")) == ["confirmed", "confirmed"]


@SYNC_ASYNC
def test_parallel_calls_in_create_agent_run_once_across_interrupt_and_resume(on_stage, runner):
    tools = [charge_tool(runner), note_tool(runner)]
    graph = lg.agent([parallel_turn()], tools, checkpointer=InMemorySaver())
    assert_parallel_run(on_stage, graph, runner)


def tool_node_graph(tools: list[BaseTool], store: Any, **options: Any) -> Any:
    """A hand-built agent: one ToolNode task runs all the calls of a model turn."""
    model = ScriptedModel(turns=[parallel_turn()])
    middleware = LedgerMiddleware(**options)
    builder = StateGraph(MessagesState)
    builder.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node(
        "tools",
        ToolNode(
            tools,
            wrap_tool_call=middleware.wrap_tool_call,
            awrap_tool_call=middleware.awrap_tool_call,
        ),
    )
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=InMemorySaver(), store=store)


@SYNC_ASYNC
def test_a_plain_tool_node_remembers_unguarded_siblings_in_the_store(on_stage, runner):
    store = InMemoryStore()
    graph = tool_node_graph([charge_tool(runner), note_tool(runner)], store)
    assert_parallel_run(on_stage, graph, runner)
    (kept,) = store.search(("effect_ledger", "tool_results"))
    assert json.loads(kept.key) == ["thread-1", "call_note"]


def test_a_plain_tool_node_without_a_store_is_refused_before_the_sibling_runs(on_stage):
    graph = tool_node_graph([lg.charge_card, lg.note], store=None)
    with pytest.raises(TypeError, match="store"):
        run(graph, "invoke", lg.USER)
    assert lg.CALLS["note"] == 0


def test_langgraph_itself_reruns_a_tool_node_task_on_resume():
    """What the store is for: without the middleware, LangGraph 1.2.24 runs a ToolNode task's
    finished calls again when one of its calls interrupted."""
    from langgraph.types import interrupt

    ran: list[str] = []

    @tool
    def ask(question: str) -> str:
        """Ask the user."""
        return str(interrupt(question))

    @tool
    def count(text: str) -> str:
        """Count."""
        ran.append(text)
        return text

    model = ScriptedModel(
        turns=[calls(("a", "count", {"text": "x"}), ("b", "ask", {"question": "?"}))]
    )
    builder = StateGraph(MessagesState)
    builder.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", ToolNode([ask, count]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    graph = builder.compile(checkpointer=InMemorySaver())
    assert "__interrupt__" in run(graph, "invoke", lg.USER)
    run(graph, "invoke", Command(resume="yes"))
    assert ran == ["x", "x"]


# --- The tool schema is the framework's, with or without the guard ---------------------------


def _charge(amount: str, currency: str, account: str, runtime: ToolRuntime) -> dict[str, Any]:
    """Charge `amount` in `currency` to `account`.

    Args:
        amount: A decimal string, such as "25.00".
        currency: A three-letter code.
        account: The customer's account.
    """
    return {}


def _refund(charge: str, amount: str | None = None) -> dict[str, Any]:
    """Refund `charge`, in full unless `amount` says how much."""
    return {}


async def _acharge(amount: str, currency: str = "EUR", *, account: str) -> dict[str, Any]:
    """Charge `amount` to `account`, asynchronously."""
    return {}


def schemas(made: BaseTool) -> tuple[Any, ...]:
    """What the model is shown, and the tool's own argument model (LangChain cannot write a
    JSON schema of an argument model that holds a ToolRuntime: its fields are compared)."""
    assert made.args_schema is not None and not isinstance(made.args_schema, dict)
    fields = {n: repr(f.annotation) for n, f in made.args_schema.model_fields.items()}
    try:
        args_schema = made.args_schema.model_json_schema()
    except Exception as exc:  # the ToolRuntime field
        args_schema = type(exc).__name__
    return (
        made.name,
        made.description,
        fields,
        args_schema,
        made.tool_call_schema.model_json_schema(),  # type: ignore[union-attr]
        convert_to_openai_tool(made),
    )


@pytest.mark.parametrize(
    ("function", "parse_docstring"),
    [(_charge, False), (_charge, True), (_refund, False), (_acharge, False)],
)
def test_the_tool_schema_is_the_same_with_and_without_the_guard(function, parse_docstring):
    plain = tool(function, parse_docstring=parse_docstring)
    with_guard = tool(guarded(tool="charge_card")(function), parse_docstring=parse_docstring)
    assert schemas(with_guard) == schemas(plain)
    assert with_guard.coroutine is not None or with_guard.func is not None
    shown = convert_to_openai_tool(with_guard)["function"]["parameters"]["properties"]
    assert shown and "runtime" not in shown


# --- Bad input: a clear error, nothing written, nothing run -----------------------------------


@guarded(tool="charge_card", target="{account}")
def _charge_tagged(amount: float, account: str, tags: set[str]) -> dict[str, Any]:
    """Charge with tags."""
    lg.CALLS["charge_card"] += 1
    return {}


def test_bad_input_writes_nothing_and_runs_nothing(on_stage):
    tagged = tool("charge_card")(_charge_tagged)
    nan = {"amount": float("nan"), "account": "acct_1", "tags": []}
    for args, error in [
        (nan, "amount"),
        ({"amount": 1.5, "account": "acct_1", "tags": ["a"]}, "tags"),
    ]:
        graph = lg.agent(
            [calls(("call_bad", "charge_card", args))], [tagged], checkpointer=InMemorySaver()
        )
        with pytest.raises(TypeError, match=error):
            run(graph, "invoke", lg.USER)
    # No thread_id (and no checkpointer): the ledger would not know the call again.
    graph = lg.agent([calls(lg.pay("call_pay", "25.00"))], [lg.charge_card])
    with pytest.raises(TypeError, match="thread_id"):
        graph.invoke(lg.USER)
    assert on_stage.effects() == [] and on_stage.charges() == []
    assert lg.CALLS["charge_card"] == 0


@SYNC_ASYNC
def test_a_ledger_that_does_not_answer_runs_nothing(monkeypatch, runner):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setattr(ledger_client.config, "_default", None)
    ledger_client.configure(f"http://127.0.0.1:{port}", "el_test_key", owner="t", retries=1)
    lg.CALLS.clear()
    graph = lg.agent(
        [calls(lg.pay("call_pay", "25.00"))], [charge_tool(runner)], checkpointer=InMemorySaver()
    )
    with pytest.raises(LedgerUnavailable):
        run(graph, runner, lg.USER)
    assert lg.CALLS["charge_card"] == 0


# --- The example ------------------------------------------------------------------------------


def test_the_example_pays_and_sends_once_and_counts_match(stage):
    done = stage.run_python(Path(__file__).resolve().parents[2] / "examples/langgraph/agent.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "charges at the provider: 1 · effects in the ledger: 1" in done.stdout
    assert "messages at the provider: 1 · effects in the ledger: 1" in done.stdout
    assert len(stage.payment_intents()) == 1 and len(stage.messages()) == 1
