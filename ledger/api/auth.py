"""Who calls: an agent key in `Authorization: Bearer elk_…` names the agent, which the routes
take with `agent_of(request)`."""

from __future__ import annotations

from django.http import HttpRequest
from ninja.security import HttpBearer

from ledger.models import Agent
from ledger.observability import logcontext
from ledger.policy.agentkeys import agent_for_key


class AgentKey(HttpBearer):
    openapi_description = "An agent key: `Authorization: Bearer elk_…`"

    def authenticate(self, request: HttpRequest, token: str) -> Agent | None:
        agent = agent_for_key(token)
        if agent is not None:
            request.agent = agent  # type: ignore[attr-defined]
            logcontext.bind(agent=agent.name)
        return agent


def agent_of(request: HttpRequest) -> Agent:
    """The agent whose key authenticated this request."""
    return request.agent  # type: ignore[attr-defined]
