"""Finding an effect's PaymentIntent through Stripe's Search API, before any listing.

One request, `GET /v1/payment_intents/search` with the query `metadata['ledger_key']:'<key>'`,
names the intents that carry the effect's key, however busy the account. But Stripe documents
its search as eventually consistent (the API reference of `payment_intents/search`, and
docs.stripe.com/search, "Data freshness"): it is not for read-after-write flows, new or updated
data is normally searchable within a minute and, during an outage, up to an hour later; and
search is not available to merchants in India. So search settles a lookup only by what it
shows, never by what it does not:

- every intent it names is read again by id (`GET /v1/payment_intents/{id}`), so that the
  ledger judges the intent as it is now, not as the index last saw it (a status that moved
  since, a decline retried with another card);
- nothing found, an error, a 429, an answer of another shape, more results than one page:
  a `Failure`, and the adapter reads its consistent listing instead, which alone can prove
  absence.

Stripe has no search for refunds: they are always listed.
"""

from __future__ import annotations

import re
from typing import Any

from reconcilers.providers.stripe import calls
from reconcilers.providers.stripe.calls import Failure

# Intents one search may name: one is expected, two are already a duplicate.
LIMIT = 10
# Keys written into the query as they are. The ledger's keys (`el_…`, base32) always are; any
# other would need the query language's escapes, and is listed instead.
_PLAIN = re.compile(r"[A-Za-z0-9_.:-]{1,200}")


def query(key: str) -> str:
    """The search query of the intents carrying `key` in metadata[ledger_key], or "" when the
    key cannot be written into one as it is."""
    return f"metadata['ledger_key']:'{key}'" if _PLAIN.fullmatch(key) else ""


def intents(sdk: Any, key: str) -> list[dict[str, Any]] | Failure:
    """The PaymentIntents that carry `key`, as Stripe's search names them and a retrieve reads
    them now; a `Failure` when search shows nothing that could settle the lookup."""
    asked = query(key)
    if not asked:
        return Failure("the key cannot be written into a search query")
    try:
        answer = sdk.v1.payment_intents.search(params={"query": asked, "limit": LIMIT})
    except Exception as exc:  # the SDK's errors, and its failures to read an answer
        return calls.failure(exc)
    named = _named(calls.body_of(answer), key)
    if isinstance(named, Failure):
        return named
    read = []
    for intent_id in named:
        item = _retrieved(sdk, intent_id)
        if isinstance(item, Failure):
            return item
        if item["metadata"].get("ledger_key") == key:
            read.append(item)
    return read or Failure("the intents search named no longer carry the key")


def _named(body: Any, key: str) -> list[str] | Failure:
    """The ids of the intents a search result holds under `key`, checked as the ledger reads
    them: a `search_result` whose one page has every result."""
    if not isinstance(body, dict) or body.get("object") != "search_result":
        return Failure("Stripe's answer is not a search result")
    data, more = body.get("data"), body.get("has_more")
    if not isinstance(data, list) or not isinstance(more, bool):
        return Failure("Stripe's search result has no data or no has_more")
    if more:
        return Failure(f"more than {LIMIT} intents carry the key")
    for item in data:
        problem = calls.shape_problem(item, "payment_intent")
        if problem:
            return Failure(f"a search result the ledger cannot read: {problem}")
    named = [item["id"] for item in data if item["metadata"].get("ledger_key") == key]
    return named or Failure("search shows no intent under the key (it may not be indexed yet)")


def _retrieved(sdk: Any, intent_id: str) -> dict[str, Any] | Failure:
    try:
        answer = sdk.v1.payment_intents.retrieve(intent_id)
    except Exception as exc:  # the SDK's errors, and its failures to read an answer
        return calls.failure(exc)
    body = calls.body_of(answer)
    problem = calls.shape_problem(body, "payment_intent")
    if problem or body["id"] != intent_id:
        return Failure(f"PaymentIntent {intent_id} could not be read: {problem or 'another id'}")
    return body
