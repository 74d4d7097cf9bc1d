"""A scripted chat model for LangChain agents: no API key, no network, and the same answer for
the same conversation in any process, so a graph resumed from its checkpoint by another process
continues where the first left off.

The model answers the n-th time it is asked within a conversation (n = the AI messages already
in it) with `turns[n]`, and with a plain "done" once the turns run out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable


class ScriptedModel(BaseChatModel):
    """Replays `turns`: AI messages, usually with tool calls, one per model call."""

    turns: list[AIMessage]
    final: str = "done"

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self  # type: ignore[return-value]  # the script already names the tools

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        asked = sum(isinstance(message, AIMessage) for message in messages)
        if asked < len(self.turns):
            message = self.turns[asked].model_copy()
        else:
            message = AIMessage(content=self.final)
        return ChatResult(generations=[ChatGeneration(message=message)])


def calls(*tool_calls: tuple[str, str, dict[str, Any]]) -> AIMessage:
    """One model turn calling `(call_id, tool name, args)` in parallel."""
    return AIMessage(
        content="",
        tool_calls=[
            {"id": call_id, "name": name, "args": args, "type": "tool_call"}
            for call_id, name, args in tool_calls
        ],
    )
