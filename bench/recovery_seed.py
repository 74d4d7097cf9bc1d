"""The crashed fleet's effects: `charge_card` effects left in dispatching with expired leases,
half of them charged at the sandbox provider before the crash."""

from __future__ import annotations

import json
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from bench.harness import EFFECT_COLUMNS, sql_exec, sql_rows

TOOL = "charge_card"
RUN_ID = "bench-recovery"
PROFILE_RUN_ID = "bench-recovery-profile"
OWNER = "bench-agent-1"
REQUEST = {"amount": "10.00", "currency": "EUR"}
LEASE_SECONDS = 60


@dataclass
class Seeded:
    ids: list[str]
    keys: list[str]  # idempotency keys, in the order of ids
    charges: dict[str, str]  # idempotency key → the provider's charge id (the charged half)


def seed_dispatching(agent_id: int, run_id: str, count: int) -> tuple[list[str], list[str]]:
    """`count` charge_card effects as the API leaves them after intent + claim, whose lease
    expired ten minutes ago and which the lease sweep has queued (next_check_at =
    lease_expires_at); with their intent and claim events. Returns (ids, idempotency keys)."""
    from ledger.models import Tool
    from ledger.policy import digests

    max_attempts = Tool.objects.get(name=TOOL).max_attempts
    ids = [str(uuid.uuid4()) for _ in range(count)]
    effect_keys = [f"{run_id}:step-{i}" for i in range(1, count + 1)]
    targets = [f"acct_{i % 977:04d}" for i in range(1, count + 1)]
    keys = [digests.idempotency_key(agent_id, k) for k in effect_keys]
    hashes = [digests.request_hash(TOOL, t, REQUEST) for t in targets]
    tokens = [uuid.uuid4().hex for _ in range(count)]
    sql_exec(
        f"""
        INSERT INTO ledger_effect ({EFFECT_COLUMNS})
        SELECT u.id, %(agent)s, u.effect_key, %(run)s, 'step-' || u.n, u.n, 'action', %(tool)s,
               u.target, %(request)s::jsonb, u.hash, u.key, 'dispatching', 1, %(max)s,
               %(owner)s, u.token, NULL, %(lease)s, now() - interval '10 minutes',
               now() - interval '10 minutes', 0, NULL, NULL, '', NULL, NULL, '', '', NULL,
               '{{}}'::jsonb, now() - interval '11 minutes', now() - interval '11 minutes', NULL, 2
          FROM unnest(%(ids)s::uuid[], %(effect_keys)s::text[], %(targets)s::text[],
                      %(hashes)s::text[], %(keys)s::text[], %(tokens)s::text[])
               WITH ORDINALITY AS u(id, effect_key, target, hash, key, token, n)
        """,
        {
            "agent": agent_id,
            "run": run_id,
            "tool": TOOL,
            "request": json.dumps(REQUEST),
            "max": max_attempts,
            "owner": OWNER,
            "lease": LEASE_SECONDS,
            "ids": ids,
            "effect_keys": effect_keys,
            "targets": targets,
            "hashes": hashes,
            "keys": keys,
            "tokens": tokens,
        },
    )
    intent_data = [{"request_hash": h, "depends_on": []} for h in hashes]
    claim_data = {"owner": OWNER, "claim_id": None, "lease_seconds": LEASE_SECONDS}
    sql_exec(
        """
        INSERT INTO ledger_effectevent
               (effect_id, kind, actor, from_status, to_status, reason, data, digest, created_at)
        SELECT u.id, 'intent', %(actor)s, '', 'planned', 'intent', u.data::jsonb, u.digest,
               now() - interval '11 minutes'
          FROM unnest(%(ids)s::uuid[], %(data)s::text[], %(digests)s::text[]) AS u(id, data, digest)
        UNION ALL
        SELECT u.id, 'transition', %(actor)s, 'planned', 'dispatching', 'claimed',
               %(claim)s::jsonb, %(claim_digest)s, now() - interval '11 minutes'
          FROM unnest(%(ids)s::uuid[]) AS u(id)
        """,
        {
            "actor": "agent:bench",
            "ids": ids,
            "data": [json.dumps(d) for d in intent_data],
            "digests": [digests.content_digest(d) for d in intent_data],
            "claim": json.dumps(claim_data),
            "claim_digest": digests.content_digest(claim_data),
        },
    )
    sql_exec(
        "INSERT INTO ledger_run (agent_id, run_id, last_seq, created_at) "
        "VALUES (%s, %s, %s, now() - interval '11 minutes')",
        [agent_id, run_id, count],
    )
    # A live table has statistics; a freshly migrated one filled in bulk has none, and the
    # planner then treats it as empty (a hash of every dispatching effect for 50 ids).
    sql_exec("ANALYZE ledger_effect, ledger_effectevent")
    return ids, keys


def charge_at_provider(base_url: str, effects: list[tuple[str, str]]) -> dict[str, str]:
    """POST /charges for each (idempotency key, account), concurrently, as the crashed agents
    did before they died. Returns key → charge id."""
    import httpx

    local = threading.local()

    def charge(item: tuple[str, str]) -> tuple[str, str]:
        if not hasattr(local, "client"):
            local.client = httpx.Client(base_url=base_url, timeout=30, trust_env=False)
        key, account = item
        response = local.client.post(
            "/charges", json={**REQUEST, "account": account}, headers={"Idempotency-Key": key}
        )
        if response.status_code != 201:
            raise RuntimeError(f"charge for {key}: {response.status_code} {response.text[:200]}")
        return key, response.json()["id"]

    with ThreadPoolExecutor(8) as pool:
        return dict(pool.map(charge, effects))


def seed(agent_id: int, run_id: str, count: int, provider_url: str) -> Seeded:
    ids, keys = seed_dispatching(agent_id, run_id, count)
    targets = dict(
        sql_rows("SELECT idempotency_key, target FROM ledger_effect WHERE run_id = %s", [run_id])
    )
    charged = [(k, targets[k]) for k in keys[::2]]  # every other one reached the provider
    return Seeded(ids, keys, charge_at_provider(provider_url, charged))


def provider_transactions(base_url: str) -> int:
    import httpx

    with httpx.Client(base_url=base_url, timeout=30, trust_env=False) as client:
        response = client.get("/_sandbox/transactions")
        response.raise_for_status()
        return len(response.json()["data"])
