"""What a drill verifies once the fault is over: the answers the clients got, acknowledged
intents against stored effects, safe repeats, and the workers doing work that needs them.

Read straight from the drill's database with psycopg: the drill runs inside a management
command whose Django connection points at another database."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import httpx
import psycopg

from devstack.drills.load import HANG_LIMIT, Api, Call, Intent
from ledger.models import Effect
from ledger.models.states import Status

POLL = 0.25

# The drills read the ledger's database directly, as an outside observer would.
EFFECTS = Effect._meta.db_table


def answer_counts(calls: Sequence[Call]) -> dict[str, Any]:
    """What the clients were answered, across every call."""
    refused = [c for c in calls if c.status == 503]
    return {
        "requests": len(calls),
        "answered 2xx": sum(1 for c in calls if c.status is not None and c.status < 300),
        "answered 503": len(refused),
        "503 without Retry-After": sum(1 for c in refused if not c.retry_after),
        "503 not 'unavailable'": sum(
            1 for c in refused if c.kind != "health" and c.error != "unavailable"
        ),
        "no answer": sum(1 for c in calls if c.status is None),
        "answer lost (502/504)": sum(1 for c in calls if c.status is not None and c.answer_lost),
        "tracebacks": sum(1 for c in calls if c.traceback),
        f"hung > {HANG_LIMIT:.0f} s": sum(1 for c in calls if c.seconds > HANG_LIMIT),
        "max latency s": round(max((c.seconds for c in calls), default=0.0), 3),
    }


def stored_effects(conn: psycopg.Connection[Any], prefix: str) -> dict[tuple[str, str], str]:
    rows = conn.execute(
        f"SELECT run_id, step_id, id FROM {EFFECTS} WHERE run_id LIKE %s", [f"{prefix}-%"]
    ).fetchall()
    return {(run_id, step_id): str(effect_id) for run_id, step_id, effect_id in rows}


def ledger_counts(intents: Sequence[Intent], stored: dict[tuple[str, str], str]) -> dict[str, int]:
    """Acknowledged intents against what the ledger holds. `lost` is an acknowledged intent
    with no stored effect, or a stored effect other than the one the client was given."""
    acked = [i for i in intents if i.effect_id]
    lost = sum(1 for i in acked if stored.get((i.run_id, i.step_id)) != i.effect_id)
    keys = {(i.run_id, i.step_id) for i in acked}
    return {
        "intents posted": len(intents),
        "acknowledged": len(acked),
        "stored": len(stored),
        "lost": lost,
        "stored, never acknowledged": sum(1 for key in stored if key not in keys),
        "never acknowledged": len(intents) - len(acked),
        "refused otherwise": sum(1 for i in intents if i.other is not None),
    }


def replay(api: Api, intents: Iterable[Intent]) -> dict[str, int]:
    """Repeat every acknowledged intent that met a fault on its way (no answer, a lost answer
    or a 503): the repeat must be a 200 carrying the same effect."""
    hit = [i for i in intents if i.effect_id and (i.unanswered or i.refused)]
    same = 0
    for intent in hit:
        call = api.call("replay", "POST", "/effects", intent.body())
        if call.status == 200 and call.body and str(call.body.get("id")) == intent.effect_id:
            same += 1
    return {"repeated after a fault": len(hit), "repeat: 200, same effect": same}


def post_unknown(api: Api, provider_url: str, run_id: str) -> str | None:
    """An effect of the lookup tool left `unknown`, as after a lost provider response: intent
    and claim, the charge made at the provider under the effect's idempotency key, then the
    outcome `unknown`. Only the reconciler (an rq job) can confirm it. Returns its id."""
    body = {
        "run_id": run_id,
        "step_id": "charge",
        "tool": "charge_card",
        "target": f"acct_{run_id}",
        "request": {"amount": "10.00", "currency": "EUR"},
        "claim": True,
        "owner": "drill",
        "claim_id": str(uuid.uuid4()),
        "lease_seconds": 60,
    }
    claimed = api.call("claim", "POST", "/effects", body)
    if claimed.status not in (200, 201) or not claimed.body:
        return None
    effect = claimed.body
    httpx.post(
        f"{provider_url}/charges",
        json={"amount": "10.00", "currency": "EUR", "account": body["target"]},
        headers={"Idempotency-Key": effect["idempotency_key"]},
        timeout=5,
        trust_env=False,
    )
    api.call(
        "outcome",
        "POST",
        f"/effects/{effect['id']}/outcome",
        {"lease_token": effect["lease_token"], "status": "unknown", "error": "drill: lost"},
    )
    return str(effect["id"])


def wait_confirmed(
    conn: psycopg.Connection[Any], ids: Sequence[str], timeout: float
) -> dict[str, float | None]:
    """Seconds until each effect was confirmed (by the reconciler), None if it was not."""
    started = time.monotonic()
    done: dict[str, float | None] = dict.fromkeys(ids)
    while time.monotonic() - started < timeout:
        pending = [i for i, seconds in done.items() if seconds is None]
        if not pending:
            break
        rows = conn.execute(
            f"SELECT id FROM {EFFECTS} WHERE id = ANY(%s::uuid[]) "
            f"AND status = '{Status.CONFIRMED.value}'",
            [pending],
        ).fetchall()
        for (effect_id,) in rows:
            done[str(effect_id)] = round(time.monotonic() - started, 2)
        time.sleep(POLL)
    return done


def run_schedules(
    conn: psycopg.Connection[Any], names: Sequence[str], timeout: float
) -> dict[str, float | None]:
    """Make django-q2 schedules due now (in SQL, instead of waiting their minute) and wait for
    the cluster to run each successfully: seconds until it did, None if it did not. The
    cluster looks at its schedules every 30 s, so this takes up to about half a minute."""
    (since,) = conn.execute("SELECT now()").fetchone() or (None,)
    conn.execute(
        "UPDATE django_q_schedule SET next_run = now() - interval '1 second' WHERE name = ANY(%s)",
        [list(names)],
    )
    started = time.monotonic()
    ran: dict[str, float | None] = dict.fromkeys(names)
    while time.monotonic() - started < timeout and None in ran.values():
        rows = conn.execute(
            'SELECT DISTINCT "group" FROM django_q_task '
            'WHERE "group" = ANY(%s) AND started >= %s AND success',
            [list(names), since],
        ).fetchall()
        for (name,) in rows:
            if ran[name] is None:
                ran[name] = round(time.monotonic() - started, 2)
        time.sleep(POLL)
    return ran


def rq_failed_jobs(redis_url: str) -> int:
    """Jobs the rq worker could not finish (kept in Redis, so lost with a Redis restart)."""
    import redis
    from rq.registry import FailedJobRegistry

    with redis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2) as client:
        return FailedJobRegistry("default", connection=client).count
