"""The query strings of the agent API's reads (docs/api.md). Each bound and format the server
checks is in the model, so the served schema declares it."""

from __future__ import annotations

from ninja import Schema
from pydantic import Field

from ledger.api.cursors import JOURNAL_CURSOR, LIST_CURSOR
from ledger.api.schemas import Label
from ledger.models.states import Status


class WaitQuery(Schema):
    wait: int | None = Field(
        None, ge=1, le=60, description="Long poll: answer as soon as the status changes."
    )


class ListFilters(Schema):
    run_id: str | None = Field(None, max_length=200)
    step_id: str | None = Field(None, max_length=200)
    status: Status | None = None
    tool: str | None = Field(None, max_length=100)
    owner: Label | None = None
    limit: int = Field(50, ge=1, le=500)
    cursor: str | None = Field(
        None, pattern=LIST_CURSOR, description="The `next_cursor` of the page before."
    )


class JournalQuery(Schema):
    limit: int = Field(100, ge=1, le=500)
    cursor: str | None = Field(
        None, pattern=JOURNAL_CURSOR, description="The `next_cursor` of the page before."
    )
