"""The agents of the adapter benchmark: per framework the same agent twice, its one tool guarded
through the framework's adapter and unguarded, each run making one call of that tool.

Each agent's model is scripted (no API key, no network): its first answer calls `charge_card`
with the same arguments, its second repeats the tool's result as text. The tool posts a charge
to the benchmark's provider (`bench.payments_provider`, which answers at once) on one keep-alive
connection: guarded, with the effect's idempotency key; unguarded, with a fresh key of its own
(the provider refuses a charge without one). So the two differ only in the adapter and the
guard: the ledger's intent+claim before the body and its outcome after.

Every run has a run identity of its own (LangGraph's `thread_id`, the Agents SDK's
`ledger_run`, Pydantic AI's conversation, MCP's `effectledger/run_id`, the DBOS workflow id),
so each guarded call is a new effect, never a replay. `timed_runs` times whole agent runs; a run
counts as an error unless the tool's charge comes back in the agent's answer.

DBOS is in `bench.adapters_dbos` (it runs in a process of its own).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from fastmcp.server.context import Context  # resolved from here in the upstream tool's hints

from bench.harness import ROOT

ARGS = {"amount": "12.50", "currency": "EUR", "account": "acct_bench"}
CALL_ID = "call_pay"
PROMPT = "Pay the invoice."
CHARGED = "ch_"  # in every charge the provider answers: the tool ran and its result came back
TOOLS_TOML = Path(ROOT, "tools.toml")


@dataclass
class Sample:
    """One measurement: the timed runs' wall times in ms, and the runs that went wrong."""

    ms: list[float] = field(default_factory=list)
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)

    def failed(self, what: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 3:
            self.error_samples.append(what[:300])


def _check(out: Any) -> str | None:
    text = out if isinstance(out, str) else json.dumps(out, default=str)
    return None if CHARGED in text else f"no charge in the answer: {text[:200]}"


def timed_runs(one: Callable[[str], Any], warmup: int, calls: int, tag: str) -> Sample:
    """`warmup` untimed runs, then `calls` timed ones, each `one(run_id)` with a new run id."""
    sample = Sample()
    for number in range(warmup + calls):
        started = time.perf_counter()
        try:
            problem = _check(one(f"{tag}-{number}"))
        except Exception as exc:  # counted and reported: the benchmark then fails
            problem = f"{type(exc).__name__}: {exc}"
        elapsed = (time.perf_counter() - started) * 1000
        if problem:
            sample.failed(problem)
        elif number >= warmup:
            sample.ms.append(elapsed)
    return sample


async def timed_runs_async(
    one: Callable[[str], Awaitable[Any]], warmup: int, calls: int, tag: str
) -> Sample:
    """`timed_runs` for an agent that runs in an event loop."""
    sample = Sample()
    for number in range(warmup + calls):
        started = time.perf_counter()
        try:
            problem = _check(await one(f"{tag}-{number}"))
        except Exception as exc:  # counted and reported: the benchmark then fails
            problem = f"{type(exc).__name__}: {exc}"
        elapsed = (time.perf_counter() - started) * 1000
        if problem:
            sample.failed(problem)
        elif number >= warmup:
            sample.ms.append(elapsed)
    return sample


class Provider:
    """The provider call every tool body makes: `POST /charges` on a keep-alive connection."""

    def __init__(self, url: str) -> None:
        self.url = url + "/charges"
        self.http = httpx.Client(timeout=10, trust_env=False)

    def charge(self, key: str, amount: str, currency: str, account: str) -> dict[str, Any]:
        body = {"amount": amount, "currency": currency, "account": account}
        response = self.http.post(self.url, json=body, headers={"Idempotency-Key": key})
        response.raise_for_status()
        charge: dict[str, Any] = response.json()
        return charge

    def close(self) -> None:
        self.http.close()


def effect_key() -> str:
    from ledger_client import current_effect

    return current_effect().idempotency_key


def plain_key() -> str:
    return f"plain-{uuid.uuid4().hex}"


# --- LangGraph: create_agent, LedgerMiddleware -------------------------------------------------


def _langgraph_tools(provider: Provider) -> tuple[Any, Any]:
    from langchain_core.tools import tool
    from ledger_client import guarded

    @tool("charge_card")
    @guarded(tool="charge_card", target="{account}")
    def guarded_charge(amount: str, currency: str, account: str) -> dict[str, Any]:
        """Charge `amount` (a decimal string) in `currency` to the card of `account`."""
        return provider.charge(effect_key(), amount, currency, account)

    @tool("charge_card")
    def plain_charge(amount: str, currency: str, account: str) -> dict[str, Any]:
        """Charge `amount` (a decimal string) in `currency` to the card of `account`."""
        return provider.charge(plain_key(), amount, currency, account)

    return guarded_charge, plain_charge


def _langchain_model() -> Any:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class ScriptedModel(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self  # the script names the tool

        def _generate(self, messages: list[Any], stop: Any = None, **kwargs: Any) -> ChatResult:
            done = [m.content for m in messages if isinstance(m, ToolMessage)]
            call = {"id": CALL_ID, "name": "charge_card", "args": dict(ARGS), "type": "tool_call"}
            message = (
                AIMessage(content=str(done[-1]))
                if done
                else AIMessage(content="", tool_calls=[call])
            )
            return ChatResult(generations=[ChatGeneration(message=message)])

    return ScriptedModel()


class LangGraphAgent:
    name = "LangGraph"

    def __init__(self, provider: Provider) -> None:
        from langchain.agents import create_agent
        from langgraph.checkpoint.memory import InMemorySaver
        from ledger_client.adapters.langgraph import LedgerMiddleware

        guarded_charge, plain_charge = _langgraph_tools(provider)
        model = _langchain_model()
        # The same agent, with a checkpointer as the adapter's docs ask; default durability.
        self.graphs = {
            True: create_agent(
                model,
                [guarded_charge],
                middleware=[LedgerMiddleware()],
                checkpointer=InMemorySaver(),
            ),
            False: create_agent(model, [plain_charge], checkpointer=InMemorySaver()),
        }

    def measure(self, guarded: bool, warmup: int, calls: int, tag: str) -> Sample:
        graph = self.graphs[guarded]
        user = {"messages": [{"role": "user", "content": PROMPT}]}

        def one(run_id: str) -> Any:
            result = graph.invoke(user, {"configurable": {"thread_id": run_id}})
            return result["messages"][-1].content

        return timed_runs(one, warmup, calls, tag)


# --- OpenAI Agents SDK: ledger_tool, ledger_run ------------------------------------------------


def _agents_model() -> Any:
    from agents import Model, ModelResponse, Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    class ScriptedModel(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            given = kwargs.get("input", args[1] if len(args) > 1 else "")
            done = [
                item.get("output")
                for item in (given if isinstance(given, list) else [])
                if isinstance(item, dict) and item.get("type") == "function_call_output"
            ]
            if done:
                text = ResponseOutputText(
                    text=str(done[-1]), type="output_text", annotations=[], logprobs=[]
                )
                output: Any = ResponseOutputMessage(
                    id="msg", type="message", role="assistant", status="completed", content=[text]
                )
            else:
                output = ResponseFunctionToolCall(
                    id=CALL_ID,
                    call_id=CALL_ID,
                    type="function_call",
                    name="charge_card",
                    arguments=json.dumps(ARGS),
                )
            return ModelResponse(output=[output], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the scripted model does not stream")

    return ScriptedModel()


class AgentsSdkAgent:
    name = "OpenAI Agents SDK"

    def __init__(self, provider: Provider) -> None:
        from agents import Agent, RunConfig, function_tool, set_tracing_disabled
        from ledger_client import guarded
        from ledger_client.adapters.openai_agents import ledger_run_config, ledger_tool

        set_tracing_disabled(True)

        @ledger_tool
        @guarded(tool="charge_card", target="{account}")
        def charge_card(amount: str, currency: str, account: str) -> dict[str, Any]:
            """Charge `amount` (a decimal string) in `currency` to the card of `account`."""
            return provider.charge(effect_key(), amount, currency, account)

        @function_tool(name_override="charge_card")
        def plain_charge(amount: str, currency: str, account: str) -> dict[str, Any]:
            """Charge `amount` (a decimal string) in `currency` to the card of `account`."""
            return provider.charge(plain_key(), amount, currency, account)

        model = _agents_model()
        self.agents = {
            True: Agent(name="payer", instructions=PROMPT, model=model, tools=[charge_card]),
            False: Agent(name="payer", instructions=PROMPT, model=model, tools=[plain_charge]),
        }
        plain = RunConfig(tracing_disabled=True)
        self.configs = {True: ledger_run_config(plain), False: plain}

    def measure(self, guarded: bool, warmup: int, calls: int, tag: str) -> Sample:
        from agents import Runner
        from ledger_client.adapters.openai_agents import ledger_run

        agent, config = self.agents[guarded], self.configs[guarded]

        def one(run_id: str) -> Any:
            if not guarded:
                return Runner.run_sync(agent, PROMPT, run_config=config).final_output
            with ledger_run(run_id):
                return Runner.run_sync(agent, PROMPT, run_config=config).final_output

        return timed_runs(one, warmup, calls, tag)


# --- Pydantic AI: LedgerCapability -------------------------------------------------------------


def _pydantic_model() -> Any:
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import FunctionModel

    def respond(messages: list[Any], info: Any) -> ModelResponse:
        done = [
            part.content
            for message in messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, ToolReturnPart)
        ]
        if done:
            return ModelResponse(parts=[TextPart(json.dumps(done[-1], default=str))])
        return ModelResponse(parts=[ToolCallPart("charge_card", dict(ARGS), tool_call_id=CALL_ID)])

    return FunctionModel(respond)


class PydanticAiAgent:
    name = "Pydantic AI"

    def __init__(self, provider: Provider) -> None:
        from ledger_client import guarded
        from ledger_client.adapters.pydantic_ai import LedgerCapability
        from pydantic_ai import Agent

        model = _pydantic_model()
        guarded_agent: Agent[None, str] = Agent(model, capabilities=[LedgerCapability()])
        plain_agent: Agent[None, str] = Agent(model)

        @guarded_agent.tool_plain
        @guarded(tool="charge_card", target="{account}")
        def charge_card(amount: str, currency: str, account: str) -> dict[str, Any]:
            """Charge `amount` (a decimal string) in `currency` to the card of `account`."""
            return provider.charge(effect_key(), amount, currency, account)

        @plain_agent.tool_plain(name="charge_card")
        def plain_charge(amount: str, currency: str, account: str) -> dict[str, Any]:
            """Charge `amount` (a decimal string) in `currency` to the card of `account`."""
            return provider.charge(plain_key(), amount, currency, account)

        self.agents = {True: guarded_agent, False: plain_agent}

    def measure(self, guarded: bool, warmup: int, calls: int, tag: str) -> Sample:
        agent = self.agents[guarded]

        def one(run_id: str) -> Any:
            # The run's identity is its conversation: Pydantic AI starts a new one per run.
            return agent.run_sync(PROMPT).output

        return timed_runs(one, warmup, calls, tag)


# --- MCP: the guarded proxy against a plain fastmcp proxy, both in this process ---------------


def _upstream(provider_url: str, http: httpx.AsyncClient) -> Any:
    """The MCP server behind the proxy: one tool, `charge_card`, on the provider."""
    from fastmcp import FastMCP
    from ledger_client.adapters.mcp import META_IDEMPOTENCY_KEY

    server = FastMCP("bench-upstream")

    @server.tool
    async def charge_card(amount: str, currency: str, account: str, ctx: Context) -> dict[str, Any]:
        """Charge `amount` (a decimal string) in `currency` to the card of `account`."""
        request = ctx.request_context
        key = (request.meta or {}).get(META_IDEMPOTENCY_KEY) if request is not None else None
        body = {"amount": amount, "currency": currency, "account": account}
        headers = {"Idempotency-Key": key if isinstance(key, str) else plain_key()}
        response = await http.post(f"{provider_url}/charges", json=body, headers=headers)
        response.raise_for_status()
        charge: dict[str, Any] = response.json()
        return charge

    return server


class McpAgent:
    """An MCP client calling `charge_card` through a proxy: the guarded proxy
    (`guarded_proxy`, the ledger's middleware on fastmcp's proxy) or fastmcp's own proxy, each
    in front of the same upstream server. Client, proxy and upstream are in this process
    (fastmcp's in-memory transport); there is no model: the client is the agent."""

    name = "MCP proxy"

    def __init__(self, provider: Provider, ledger_url: str, api_key: str) -> None:
        self.provider_url = provider.url.removesuffix("/charges")
        self.ledger_url, self.api_key = ledger_url, api_key

    def measure(self, guarded: bool, warmup: int, calls: int, tag: str) -> Sample:
        return asyncio.run(self._measure(guarded, warmup, calls, tag))

    async def _measure(self, guarded: bool, warmup: int, calls: int, tag: str) -> Sample:
        from fastmcp.server import create_proxy
        from ledger_client.adapters.mcp import ToolRoute, guarded_proxy
        from ledger_client.aio import AsyncLedger

        async with (
            httpx.AsyncClient(timeout=10, trust_env=False) as http,
            AsyncLedger(self.ledger_url, self.api_key, owner="adapters-bench-mcp") as ledger,
        ):
            upstream = _upstream(self.provider_url, http)
            if guarded:
                routes = {"charge_card": ToolRoute(target="{account}")}
                proxy = guarded_proxy(upstream, tools_toml=TOOLS_TOML, ledger=ledger, routes=routes)
            else:
                proxy = create_proxy(upstream)
            return await _session(proxy, warmup, calls, tag)


async def _session(proxy: Any, warmup: int, calls: int, tag: str) -> Sample:
    """The timed calls, in one client session with `proxy`."""
    from fastmcp import Client
    from ledger_client.adapters.mcp import META_CALL_ID, META_RUN_ID

    async with Client(proxy) as client:

        async def one(run_id: str) -> Any:
            meta = {META_RUN_ID: run_id, META_CALL_ID: CALL_ID}
            result = await client.call_tool(
                "charge_card", dict(ARGS), meta=meta, raise_on_error=False
            )
            texts = " ".join(getattr(block, "text", "") for block in result.content)
            if result.is_error:
                raise RuntimeError(f"tool error: {texts[:200]}")
            return texts

        return await timed_runs_async(one, warmup, calls, tag)
