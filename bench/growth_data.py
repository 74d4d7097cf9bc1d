"""The growth benchmark's history, generated in SQL (`INSERT … SELECT generate_series`):
terminal effects with ten events each, spread over past months, and the sealer run over the
month that is archived. Runs in-process on the benchmark's database (`setup_django`)."""

from __future__ import annotations

import time
from datetime import date

from bench.harness import EFFECT_COLUMNS, sql_exec, sql_rows

EVENTS_PER_EFFECT = 10
# Effects (and ten times as many events) per statement: one transaction each.
EFFECTS_PER_BATCH = 50_000
TOOL = "send_email"
DATA = '{"n": 1}'


def months_back(today: date, n: int) -> date:
    index = today.year * 12 + today.month - 1 - n
    return date(index // 12, index % 12 + 1, 1)


def ensure_months(months: list[date]) -> None:
    from ledger.audit import partitions

    for month in months:
        partitions.create_month(month)


def fill_month(agent_id: int, month: date, events: int, start: int) -> int:
    """`events` events (of events / 10 confirmed effects) with times spread over `month`,
    effect numbers from `start`; returns the next free number. Triggers are off for the load
    (session_replication_role = replica): the rows are consistent by construction."""
    from ledger.policy import digests

    effects = max(1, events // EVENTS_PER_EFFECT)
    digest = digests.content_digest({"n": 1})
    seconds = 27 * 86400  # times within the month's first 27 days, never past its end
    done = 0
    while done < effects:
        size = min(EFFECTS_PER_BATCH, effects - done)
        first = start + done
        sql_exec("SET session_replication_role = replica")
        try:
            sql_exec(
                _FILL, _params(agent_id, month, (start, first, size), seconds / effects, digest)
            )
        finally:
            sql_exec("SET session_replication_role = DEFAULT")
        done += size
    return start + effects


def _params(agent_id, month, numbers, spread, digest) -> dict:
    base, first, size = numbers
    return {
        "agent": agent_id,
        "tool": TOOL,
        "first": first,
        "last": first + size - 1,
        "month": f"{month.isoformat()} 00:00:00+00",
        "spread": spread,
        "base": base,
        "events": EVENTS_PER_EFFECT,
        "data": DATA,
        "digest": digest,
    }


# Effects `first`..`last`, each at month start + (its number within the month) × spread, and
# its ten events a second apart.
_FILL = f"""
WITH made AS (
    INSERT INTO ledger_effect ({EFFECT_COLUMNS})
    SELECT gen_random_uuid(), %(agent)s, 'growth:' || g, 'growth-' || (g / 1000), 'step-' || g,
           g, 'action', %(tool)s, 'someone@example.com', '{{}}'::jsonb, 'v1:growth',
           'growth-' || g, 'confirmed', 1, 3, '', '', NULL, NULL, NULL, NULL, 0, NULL, NULL, '',
           NULL, NULL, '', '', NULL, '{{}}'::jsonb, t.at, t.at, t.at + interval '10 seconds', 2
      FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g,
           LATERAL (SELECT %(month)s::timestamptz
                         + make_interval(secs => (g - %(base)s) * %(spread)s) AS at) AS t
    RETURNING id, created_at
)
INSERT INTO ledger_effectevent
       (effect_id, kind, actor, from_status, to_status, reason, data, digest, created_at)
SELECT made.id, 'transition', 'agent:bench', 'planned', 'confirmed', 'growth',
       %(data)s::jsonb, %(digest)s, made.created_at + make_interval(secs => k)
  FROM made CROSS JOIN generate_series(1, %(events)s) AS k
"""


def seal_month(partition: str, batch: int = 20_000) -> tuple[int, float]:
    """Run the sealer until every event of `partition` is sealed (it seals in id order, so
    until it has passed the partition's highest id); (seals written, seconds)."""
    from ledger.audit.seal import chain_head, seal_pending

    began, total = time.monotonic(), 0
    highest = sql_rows(f"SELECT coalesce(max(id), 0) FROM {partition}")[0][0]
    while (chain_head().event_id or 0) < highest:
        sealed = seal_pending(batch, grace=0)
        total += sealed
        if not sealed:
            break
    return total, time.monotonic() - began


def event_count() -> int:
    return sql_rows("SELECT count(*) FROM ledger_effectevent")[0][0]


def sample_effects(count: int) -> list[str]:
    """Effects picked at random (at 0 events of history, the lifecycle runs' own), for the
    effect page."""
    rows = sql_rows("SELECT id::text FROM ledger_effect ORDER BY random() LIMIT %s", [count])
    return [r[0] for r in rows]
