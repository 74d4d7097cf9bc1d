"""The operator pages' dataset, built set-based (`INSERT … SELECT generate_series`): effects
of four agents in runs over 60 days, open and resolved review items with their decisions and
compensations, dependencies, events and runs; then `VACUUM ANALYZE`."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from bench.harness import EFFECT_COLUMNS, sql_exec, sql_rows

AGENTS = ("bench-agent-1", "bench-agent-2", "bench-agent-3", "bench-agent-4")
OPERATOR, COLLEAGUE = "bench-operator", "bench-operator-2"
# Review reasons by k % 20 (k numbers the open items): how often each comes up.
REASONS = (
    *["unresolved_past_window"] * 6,  # 0–5: status by k % 4
    *["no_lookup"] * 4,  # 6–9: send_email, unknown
    *["reconciliation_inconclusive"] * 3,  # 10–12: create_ticket, unknown
    *["attempts_exhausted"] * 2,  # 13–14
    "duplicate",  # 15: confirmed
    "provider_mismatch",  # 16
    "not_found_unproven",  # 17: create_ticket
    "compensation_failed",  # 18: a failed refund_card compensation
    "manual_execution",  # 19: a planned compensation nobody can send
)


@dataclass(frozen=True)
class Layout:
    """Where everything sits among the generated rows. Action effects are numbered g = 1 …
    `actions` in creation order; open item k (1 … reviews) is on effect g = base + 5·⌊(k−1)/2⌋
    + 1 or 3, so the reviewed effects are two in five of the newest ones. Decisions and
    compensations follow the actions (g > actions), so that `effects` rows are made in all."""

    effects: int
    reviews: int
    actions: int
    base: int  # action effects up to here have no open review item
    old: int  # resolved review items (with a decision each) on effects up to `base`
    step: int  # the old items' effects: g = j · step
    decisions: int  # decision effects: on open-review effects (k % 7 = 3), then the old ones
    compensations: int  # of the old "compensate" decisions (j % 4 = 0)

    @classmethod
    def of(cls, effects: int, reviews: int) -> Layout:
        old = reviews // 5
        open_decisions = (reviews - 3) // 7 + 1
        compensations = old // 4
        actions = effects - open_decisions - old - compensations
        base = actions - 5 * ((reviews + 1) // 2)
        return cls(
            effects=effects,
            reviews=reviews,
            actions=actions,
            base=base,
            old=old,
            step=max(base // (old + 1), 1),
            decisions=open_decisions + old,
            compensations=compensations,
        )

    @property
    def recent(self) -> int:
        """Action effects after this one were created within the last day."""
        return self.actions - self.actions // 60


def _id(g: str) -> str:
    """The effect id of generated row `g`: time-ordered like a UUIDv7 (ids of one day sit
    together in the primary key, as in a real table), unique."""
    return f"(lpad(to_hex({g}), 12, '0') || left(md5(({g})::text), 20))::uuid"


def _agent(g: str) -> str:
    return f"(%(agents)s::bigint[])[mod(({g}) / 20, %(n_agents)s) + 1]"


def _run(g: str) -> str:
    return f"('run-' || lpad((({g}) / 20)::text, 6, '0'))"


def _key(g: str) -> str:
    return f"({_run(g)} || ':step-' || (mod({g}, 20) + 1))"


def _created(g: str) -> str:
    """60 days of history in creation order; the newest effect is an hour old."""
    return (
        f"(%(t0)s::timestamptz - interval '60 days' "
        f"+ (({g})::float8 / %(actions)s) * (interval '60 days' - interval '1 hour'))"
    )


def _idem_key(g: str) -> str:
    return f"('el_' || lpad(to_hex({g}), 8, '0') || left(md5('k' || ({g})), 24))"


# Open items: k, the effect's row, the reason and what goes with it, when it was opened.
PLAN_REVIEW = f"""
CREATE TEMP TABLE plan_review AS
SELECT s.k, s.g, (%(reasons)s::text[])[mod(s.k, 20) + 1] AS reason,
       CASE WHEN mod(s.k, 20) < 6
            THEN (ARRAY['planned', 'dispatching', 'awaiting_confirmation',
                        'unknown'])[mod(s.k, 4) + 1]
            WHEN mod(s.k, 20) = 15 THEN 'confirmed'
            WHEN mod(s.k, 20) = 18 THEN 'failed'
            WHEN mod(s.k, 20) = 19 THEN 'planned'
            ELSE 'unknown' END AS status,
       CASE WHEN mod(s.k, 20) >= 18 THEN 'compensation' ELSE 'action' END AS kind,
       CASE WHEN mod(s.k, 20) BETWEEN 6 AND 9 OR mod(s.k, 20) = 19 THEN 'send_email'
            WHEN mod(s.k, 20) BETWEEN 10 AND 12 OR mod(s.k, 20) = 17 THEN 'create_ticket'
            WHEN mod(s.k, 20) = 18 THEN 'refund_card'
            WHEN mod(s.k, 20) < 6
            THEN (ARRAY['charge_card', 'create_ticket', 'send_email'])[mod(s.k / 20, 3) + 1]
            ELSE 'charge_card' END AS tool,
       GREATEST({_created("s.g")} + interval '1 minute',
                %(t0)s::timestamptz - interval '14 days' * (1 - s.k::float8 / %(reviews)s))
           AS opened_at,
       CASE WHEN mod(s.k, 10) = 0 THEN %(me)s::int
            WHEN mod(s.k, 10) = 5 THEN %(colleague)s::int END AS assignee_id
  FROM (SELECT k, %(base)s + 5 * ((k - 1) / 2) + CASE WHEN mod(k, 2) = 1 THEN 1 ELSE 3 END AS g
          FROM generate_series(1, %(reviews)s) k) s
"""


# Decisions, numbered after the actions in the order they were taken: a retry on one in seven
# open-review effects (from an earlier review), and one per old resolved item.
PLAN_DECISION = f"""
CREATE TEMP TABLE plan_decision AS
SELECT %(actions)s + row_number() OVER (ORDER BY resolved_at, target_g) AS dg, *
  FROM (SELECT r.g AS target_g, 'retry' AS action, 'not_found_unproven' AS reason,
               c.at + (r.opened_at - c.at) / 4 AS opened_at,
               c.at + (r.opened_at - c.at) / 2 AS resolved_at
          FROM plan_review r CROSS JOIN LATERAL (SELECT {_created("r.g")} AS at) c
         WHERE mod(r.k, 7) = 3
        UNION ALL
        SELECT j * %(step)s,
               (ARRAY['compensate', 'confirm', 'fail', 'retry'])[mod(j, 4) + 1],
               (ARRAY['duplicate', 'reconciliation_inconclusive', 'no_lookup',
                      'not_found_unproven'])[mod(j, 4) + 1],
               {_created("j * %(step)s")} + interval '1 day',
               {_created("j * %(step)s")} + interval '1 day 3 hours'
          FROM generate_series(1, %(old)s) j) d
"""


PLAN_COMPENSATION = """
CREATE TEMP TABLE plan_compensation AS
SELECT %(actions)s + %(decisions)s + row_number() OVER (ORDER BY resolved_at) AS cg,
       target_g, resolved_at + interval '1 second' AS created_at
  FROM plan_decision WHERE action = 'compensate'
"""


_STATUS = """
CASE WHEN r.g IS NOT NULL THEN r.status
     WHEN o.action IS NOT NULL
     THEN CASE o.action WHEN 'compensate' THEN 'compensated' WHEN 'fail' THEN 'failed'
                        ELSE 'confirmed' END
     WHEN b.g IS NOT NULL THEN 'planned'
     WHEN s.g > %(recent)s
     THEN CASE mod(s.g, 10) WHEN 1 THEN 'planned' WHEN 3 THEN 'dispatching'
                            WHEN 7 THEN 'awaiting_confirmation' ELSE 'confirmed' END
     WHEN mod(s.g, 53) = 0 THEN 'failed'
     WHEN mod(s.g, 97) = 0 THEN 'cancelled'
     ELSE 'confirmed' END
"""


_TOOL = """
CASE WHEN r.g IS NOT NULL THEN r.tool
     WHEN o.action = 'compensate' THEN 'charge_card'
     ELSE (ARRAY['charge_card', 'charge_card', 'send_email', 'create_ticket', 'get_balance',
                 'refund_card'])[mod(s.g / 3, 6) + 1] END
"""


_REQUEST = """
CASE x.tool
     WHEN 'send_email'
     THEN jsonb_build_object('to', 'customer-' || mod(s.g, 5003) || '@example.com',
                             'template', 'receipt')
     WHEN 'create_ticket' THEN jsonb_build_object('queue', 'billing',
                                                  'subject', 'Refund request ' || mod(s.g, 7919))
     WHEN 'get_balance' THEN jsonb_build_object('account', 'acct_' || mod(s.g, 977))
     ELSE jsonb_build_object('amount', to_char(mod(s.g, 90000) / 100.0 + 1, 'FM99990.00'),
                             'currency', 'EUR') END
"""


INSERT_ACTIONS = f"""
INSERT INTO ledger_effect ({EFFECT_COLUMNS})
SELECT {_id("s.g")}, {_agent("s.g")}, {_key("s.g")}, {_run("s.g")}, 'step-' || (mod(s.g, 20) + 1),
       mod(s.g, 20) + 1, COALESCE(r.kind, 'action'), x.tool, 'acct_' || mod(s.g, 977),
       {_REQUEST}, 'v1:' || md5(s.g::text), {_idem_key("s.g")}, x.status,
       LEAST(3, CASE WHEN x.status IN ('planned', 'cancelled') THEN 0
                     WHEN r.reason = 'attempts_exhausted' THEN 3 ELSE 1 END
                + CASE WHEN mod(r.k, 7) = 3 THEN 1 ELSE 0 END),
       3, 'worker-' || mod(s.g, 8), NULL, NULL,
       CASE WHEN x.status = 'dispatching' THEN 60 END,
       CASE WHEN x.status = 'dispatching' THEN c.at + interval '61 seconds' END,
       CASE WHEN x.status IN ('dispatching', 'awaiting_confirmation')
            THEN c.at + interval '5 minutes' END,
       CASE WHEN r.reason = 'reconciliation_inconclusive' THEN 5 ELSE 0 END,
       CASE WHEN x.status NOT IN ('planned', 'dispatching', 'cancelled')
            THEN c.at + interval '2 seconds' END,
       CASE WHEN x.status = 'awaiting_confirmation' THEN c.at + interval '15 minutes' END,
       CASE WHEN x.status IN ('confirmed', 'compensated') THEN 'ch_' || left(md5('c' || s.g), 24)
            ELSE '' END,
       CASE WHEN x.status IN ('confirmed', 'compensated')
            THEN jsonb_build_object('id', 'ch_' || left(md5('c' || s.g), 24),
                                    'status', 'succeeded') END,
       CASE WHEN x.status = 'failed'
            THEN '{{"code": "declined", "message": "declined by the provider"}}'::jsonb END,
       CASE WHEN x.status IN ('confirmed', 'compensated', 'failed')
            THEN 'v1:' || md5('o' || s.g) ELSE '' END,
       '',
       CASE WHEN r.kind = 'compensation' THEN {_id("s.g - 1")} END,
       CASE WHEN r.kind = 'compensation'
            THEN jsonb_build_object('policy', jsonb_build_object(
                     'actor', 'operator:' || %(colleague_name)s,
                     'reason', 'refund the duplicate charge'))
            ELSE jsonb_build_object('model', 'bench-model-1',
                                    'prompt_hash', left(md5('p' || s.g / 20), 16)) END,
       c.at, c.at + interval '2 seconds',
       CASE WHEN x.status IN ('confirmed', 'compensated', 'failed', 'cancelled')
            THEN c.at + interval '2 seconds' END,
       CASE x.status WHEN 'planned' THEN 1 WHEN 'dispatching' THEN 2 ELSE 3 END
  FROM generate_series(1, %(actions)s) AS s(g)
  LEFT JOIN plan_review r ON r.g = s.g
  LEFT JOIN plan_decision o ON o.target_g = s.g AND o.target_g <= %(base)s
  LEFT JOIN plan_review b ON b.g = s.g - 1 AND mod(b.k, 20) = 2
  CROSS JOIN LATERAL (SELECT {_created("s.g")} AS at) c
  CROSS JOIN LATERAL (SELECT {_STATUS} AS status, {_TOOL} AS tool) x
"""


# What each decision did to its effect: (status before, status after).
_BEFORE_AFTER = """
CASE d.action WHEN 'retry' THEN ARRAY['unknown', 'planned']
              WHEN 'confirm' THEN ARRAY['unknown', 'confirmed']
              WHEN 'fail' THEN ARRAY['unknown', 'failed']
              ELSE ARRAY['confirmed', 'confirmed'] END
"""


INSERT_DECISIONS = f"""
INSERT INTO ledger_effect ({EFFECT_COLUMNS})
SELECT {_id("d.dg")}, {_agent("d.target_g")}, {_key("d.target_g")} || ':decision:1',
       {_run("d.target_g")}, 'step-' || (mod(d.target_g, 20) + 1) || ':decision', 21,
       'decision', 'operator_decision', 'effect:' || {_id("d.target_g")},
       jsonb_build_object('action', d.action, 'reason', 'checked with the provider',
                          'evidence', 'support ticket ' || d.dg, 'force', false),
       'v1:' || md5('d' || d.dg), {_idem_key("d.dg")}, 'confirmed', 0, 1, '', NULL, NULL,
       NULL, NULL, NULL, 0, NULL, NULL, '', NULL, NULL, '', '', {_id("d.target_g")},
       jsonb_build_object('actor', 'operator:' || %(colleague_name)s,
                          'user_id', %(colleague)s::int, 'action', d.action,
                          'reason', 'checked with the provider', 'evidence', '', 'ground', '',
                          'review_reason', d.reason,
                          'before', jsonb_build_object('status', ba.s[1]),
                          'after', jsonb_build_object('status', ba.s[2]),
                          'compensation', NULL),
       d.resolved_at, d.resolved_at, d.resolved_at, 1
  FROM plan_decision d CROSS JOIN LATERAL (SELECT {_BEFORE_AFTER} AS s) ba
"""


INSERT_COMPENSATIONS = f"""
INSERT INTO ledger_effect ({EFFECT_COLUMNS})
SELECT {_id("p.cg")}, {_agent("p.target_g")}, {_key("p.target_g")} || ':compensation:1',
       {_run("p.target_g")}, 'step-' || (mod(p.target_g, 20) + 1) || ':compensation', 22,
       'compensation', 'refund_card', 'acct_' || mod(p.target_g, 977),
       jsonb_build_object('charge', 'ch_' || left(md5('c' || p.target_g), 24)),
       'v1:' || md5('r' || p.cg), {_idem_key("p.cg")}, 'confirmed', 1, 3, 'worker-1', NULL,
       NULL, NULL, NULL, NULL, 0, p.created_at + interval '2 seconds', NULL,
       're_' || left(md5('r' || p.cg), 24), jsonb_build_object('status', 'refunded'), NULL,
       'v1:' || md5('o' || p.cg), '', {_id("p.target_g")},
       jsonb_build_object('policy', jsonb_build_object(
           'actor', 'operator:' || %(colleague_name)s, 'reason', 'refund the duplicate charge')),
       p.created_at, p.created_at + interval '2 seconds', p.created_at + interval '2 seconds', 3
  FROM plan_compensation p
"""


# Each item carries its effect's tool, agent, run and creation time, as
# ledger.rules.reviewqueue copies them.
INSERT_REVIEWS = f"""
INSERT INTO reviews_reviewitem
       (effect_id, reason, opened_at, due_at, assignee_id, resolved_at, resolved_by_id,
        resolution, decision_id, tool, agent_id, run_id, effect_created_at)
SELECT i.effect_id, i.reason, i.opened_at, i.opened_at + interval '7 days', i.assignee_id,
       i.resolved_at, i.resolved_by_id, i.resolution, i.decision_id, e.tool, e.agent_id, e.run_id,
       e.created_at
  FROM (SELECT {_id("d.target_g")} AS effect_id, d.reason, d.opened_at,
               %(colleague)s::int AS assignee_id, d.resolved_at,
               %(colleague)s::int AS resolved_by_id,
               d.action || ': checked with the provider' AS resolution,
               {_id("d.dg")} AS decision_id
          FROM plan_decision d
        UNION ALL
        SELECT {_id("r.g")}, r.reason, r.opened_at, r.assignee_id, NULL, NULL, '', NULL
          FROM plan_review r) i
  JOIN ledger_effect e ON e.id = i.effect_id
 ORDER BY i.opened_at
"""


# Satisfied dependencies (one in four reviewed effects waited for the effect before it), and
# planned effects held back by a reviewed one that is not confirmed (one in twenty).
INSERT_DEPENDENCIES = f"""
INSERT INTO ledger_effectdependency (downstream_id, upstream_id)
SELECT {_id("r.g")}, {_id("r.g - 1")} FROM plan_review r WHERE mod(r.k, 4) = 1
UNION ALL
SELECT {_id("r.g + 1")}, {_id("r.g")} FROM plan_review r WHERE mod(r.k, 20) = 2
"""


# Events from the effects as they are: every reviewed, every fourth other effect (by seq), every
# compensation and decision. In time order, so that ids follow time as in a real table. The
# first condition only names the effect, so it filters before the candidate events are built.
INSERT_EVENTS = """
INSERT INTO ledger_effectevent
       (effect_id, kind, actor, from_status, to_status, reason, data, digest, created_at)
SELECT e.id, v.kind, v.actor, v.from_status, v.to_status, v.reason, v.data,
       md5(e.id::text || v.n), v.at
  FROM ledger_effect e
  JOIN ledger_agent a ON a.id = e.agent_id
  LEFT JOIN reviews_reviewitem r ON r.effect_id = e.id AND r.resolved_at IS NULL
  CROSS JOIN LATERAL (VALUES
      (1, CASE WHEN e.kind = 'decision' THEN 'decision' ELSE 'intent' END,
       CASE WHEN e.kind = 'decision' THEN e.provenance ->> 'actor' ELSE 'agent:' || a.name END,
       '', CASE WHEN e.kind = 'decision' THEN 'confirmed' ELSE 'planned' END,
       CASE WHEN e.kind = 'decision' THEN e.provenance ->> 'reason' ELSE 'intent' END,
       CASE WHEN e.kind = 'decision'
            THEN jsonb_build_object('target', e.parent_id, 'action', e.provenance -> 'action',
                                    'before', e.provenance -> 'before',
                                    'after', e.provenance -> 'after')
            ELSE jsonb_build_object('request_hash', e.request_hash,
                                    'depends_on', '[]'::jsonb) END,
       e.created_at),
      (2, 'transition', 'agent:' || a.name, 'planned', 'dispatching', 'claimed',
       jsonb_build_object('owner', e.lease_owner, 'claim_id', NULL, 'lease_seconds', 60),
       e.created_at + interval '1 second'),
      (3, 'transition', 'agent:' || a.name,
       CASE WHEN e.status = 'cancelled' THEN 'planned' ELSE 'dispatching' END,
       CASE WHEN e.status = 'compensated' THEN 'confirmed' ELSE e.status END, 'outcome',
       CASE WHEN e.provider_ref <> '' THEN jsonb_build_object('provider_ref', e.provider_ref)
            ELSE '{}'::jsonb END,
       e.created_at + interval '2 seconds'),
      (4, 'reconciliation', 'system:reconciler', '', '',
       CASE r.reason WHEN 'duplicate' THEN 'found' WHEN 'provider_mismatch' THEN 'mismatch'
                     WHEN 'not_found_unproven' THEN 'not_found' ELSE 'inconclusive' END,
       jsonb_build_object('status', CASE WHEN r.reason = 'duplicate' THEN 'succeeded' END,
                          'provider_ref', NULL,
                          'detail', 'lookup ' || CASE r.reason WHEN 'provider_mismatch'
                                                      THEN 'found a different amount'
                                                      ELSE 'was not conclusive' END),
       e.created_at + interval '10 minutes')
  ) AS v(n, kind, actor, from_status, to_status, reason, data, at)
 WHERE (e.kind IN ('decision', 'compensation') OR r.id IS NOT NULL OR mod(e.seq, 4) = 0)
   AND CASE WHEN e.kind = 'decision' THEN v.n = 1
            ELSE v.n = 1
                 OR (v.n = 2 AND e.status NOT IN ('planned', 'cancelled'))
                 OR (v.n = 3 AND e.status NOT IN ('planned', 'dispatching'))
                 OR (v.n = 4 AND r.reason IN ('reconciliation_inconclusive', 'duplicate',
                                              'provider_mismatch', 'not_found_unproven')) END
 ORDER BY v.at, e.id, v.n
"""


INSERT_RUNS = """
INSERT INTO ledger_run (agent_id, run_id, last_seq, created_at)
SELECT agent_id, run_id, max(seq), min(created_at) FROM ledger_effect GROUP BY agent_id, run_id
"""


def people() -> tuple[Any, Any]:
    """The signed-in operator and a colleague (both in the operator role), made if missing."""
    from django.contrib.auth.models import User

    from ledger.policy.roles import OPERATOR as ROLE
    from ledger.policy.roles import grant

    made = []
    for name in (OPERATOR, COLLEAGUE):
        user, _ = User.objects.get_or_create(username=name)
        grant(user, ROLE)
        made.append(user)
    return made[0], made[1]


def build(layout: Layout) -> dict[str, float]:
    """Fill the fresh database; returns seconds per step."""
    from ledger.models import Agent

    me, colleague = people()
    agents = [Agent.objects.create(name=name).id for name in AGENTS]
    params = {
        **asdict(layout),
        "recent": layout.recent,
        "t0": sql_rows("SELECT now()")[0][0],
        "agents": agents,
        "n_agents": len(agents),
        "reasons": list(REASONS),
        "me": me.id,
        "colleague": colleague.id,
        "colleague_name": COLLEAGUE,
    }
    steps = [
        ("plan", [PLAN_REVIEW, PLAN_DECISION, PLAN_COMPENSATION]),
        ("effects", [INSERT_ACTIONS, INSERT_DECISIONS, INSERT_COMPENSATIONS]),
        ("review items", [INSERT_REVIEWS]),
        ("dependencies", [INSERT_DEPENDENCIES]),
        ("events", [INSERT_EVENTS]),
        ("runs", [INSERT_RUNS]),
    ]
    seconds: dict[str, float] = {}
    for name, statements in steps:
        start = time.perf_counter()
        rows = 0
        for statement in statements:
            rows += max(sql_exec(statement, params), 0)
        if name == "plan":
            sql_exec("ANALYZE plan_review")
            sql_exec("ANALYZE plan_decision")
        seconds[name] = time.perf_counter() - start
        print(f"  {name}: {rows} rows in {seconds[name]:.1f} s", flush=True)
    sql_exec("DROP TABLE plan_review, plan_decision, plan_compensation")
    start = time.perf_counter()
    vacuum_analyze()
    seconds["vacuum analyze"] = time.perf_counter() - start
    print(f"  VACUUM ANALYZE in {seconds['vacuum analyze']:.1f} s", flush=True)
    return seconds


def vacuum_analyze() -> None:
    for table in (
        "ledger_effect",
        "ledger_effectevent",
        "ledger_effectdependency",
        "ledger_run",
        "reviews_reviewitem",
        "auth_user",
    ):
        sql_exec(f"VACUUM ANALYZE {table}")


def describe() -> dict[str, Any]:
    """What the database holds, for the report."""
    counts = dict(
        sql_rows(
            "SELECT 'effects', count(*) FROM ledger_effect "
            "UNION ALL SELECT 'events', count(*) FROM ledger_effectevent "
            "UNION ALL SELECT 'open review items', count(*) FROM reviews_reviewitem "
            "          WHERE resolved_at IS NULL "
            "UNION ALL SELECT 'resolved review items', count(*) FROM reviews_reviewitem "
            "          WHERE resolved_at IS NOT NULL "
            "UNION ALL SELECT 'dependencies', count(*) FROM ledger_effectdependency "
            "UNION ALL SELECT 'runs', count(*) FROM ledger_run"
        )
    )
    statuses = dict(sql_rows("SELECT status, count(*) FROM ledger_effect GROUP BY 1 ORDER BY 2"))
    kinds = dict(sql_rows("SELECT kind, count(*) FROM ledger_effect GROUP BY 1 ORDER BY 2"))
    reasons = dict(
        sql_rows(
            "SELECT reason, count(*) FROM reviews_reviewitem WHERE resolved_at IS NULL "
            "GROUP BY 1 ORDER BY 2 DESC"
        )
    )
    sizes = dict(
        sql_rows(
            "SELECT relname, pg_size_pretty(pg_total_relation_size(oid)) FROM pg_class "
            "WHERE relname IN ('ledger_effect', 'ledger_effectevent', 'reviews_reviewitem')"
        )
    )
    return {
        "counts": counts,
        "statuses": statuses,
        "kinds": kinds,
        "reasons": reasons,
        "sizes": sizes,
    }
