"""Server time of the operator pages at scale, against the raw SQL each page needs.

The issue's goal: with 1,000,000 effects and 100,000 open review items, the review queue and
the effect detail page answer within 150 ms at the 95th percentile (server time).

1. **The dataset** is built set-based (`INSERT … SELECT generate_series`, no per-row ORM) in a
   fresh database derived from DATABASE_URL (`<name>_bench_pages`), migrated, with the tools of
   `tools.toml`: effects of four agents in runs of 20 steps over 60 days, in creation order,
   mostly confirmed, some failed or cancelled, the last day's partly in flight. 100,000 of the
   last ~15 days' effects have an open review item (ten reasons, each with the statuses and
   tools it comes with; opened over 14 days, due 7 days later, a fifth of them assigned), some
   with dependencies (satisfied ones, and planned effects they hold back), a decision from an
   earlier review, or a compensation as the reviewed effect itself. Older effects carry resolved
   review items with their decisions (and the compensation of each "compensate"). Every
   reviewed effect and every fourth other one has its events (intent, claim, outcome,
   reconciliation); decisions have theirs. Decision and compensation effects count towards
   `--effects`. Then `VACUUM ANALYZE`.
2. **Server time**: Django's test `Client`, signed in as an operator — the whole request path
   (middleware, session, auth, view, ORM, template) in-process, no network — for the queue
   (default, page 50, filters by tool, reason, age, assignee, sort by due time, the htmx
   partial), the detail page of effects in review (a random sample, each opened once) and the
   overview. Page kinds take turns in rounds, after a warm-up; p50 / p95 / max per kind, and the
   share of it spent waiting for SQL. An untimed pass counts the queries of each page
   (`CaptureQueriesContext`) and names its slowest one.
3. **Baseline**, in the same rounds (every fourth): the page's main query on raw psycopg
   (client-side binding, as Django): the 50 open items joined to effect and agent in the page's
   order and filter, an effect's events, the overview's counts. The ratio page ÷ raw is of the
   medians. Besides wall time, the CPU of each request in this process and in its PostgreSQL
   backend (from /proc), which another job on the machine barely changes.
4. A page whose p95 misses the goal gets `EXPLAIN (ANALYZE, BUFFERS)` of its slowest query
   (`--explain`: every page).

The database is dropped at the end unless --keep-db; --reuse-db measures one kept earlier
(after `migrate`, so new indexes apply). Results go to `var/bench/pages.json`. Exit status 0
also when the goal is missed (this is a measurement); 1 when a page did not answer 200.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import re
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Run as a file, this script has bench/ on sys.path: `bench.…` imports need the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    CLOCK_TICKS,
    ROOT,
    bench_database,
    code_version,
    database_url,
    drop_database,
    fresh_database,
    machine_ticks,
    manage,
    print_grid,
    run_stoppable,
)

RESULT_FILE = ROOT / "var" / "bench" / "pages.json"
GOAL_MS = 150.0  # p95 server time of the queue and detail pages
PAGE_SIZE = 50  # reviews.views.queue.PAGE_SIZE
AGENTS = ("bench-agent-1", "bench-agent-2", "bench-agent-3", "bench-agent-4")
OPERATOR, COLLEAGUE = "bench-operator", "bench-operator-2"
DEEP_PAGE = 50
# Review reasons by k % 20 (k numbers the open items): how often each comes up.
REASONS = (
    *["unresolved_past_window"] * 6,  # 0–5: status by k % 4
    *["no_lookup"] * 4,  # 6–9: send_email, unknown
    *["reconciliation_inconclusive"] * 3,  # 10–12: create_ticket, unknown
    *["attempts_exhausted"] * 2,  # 13–14
    "possible_duplicate",  # 15: confirmed
    "provider_mismatch",  # 16
    "not_found_unproven",  # 17: create_ticket
    "compensation_failed",  # 18: a failed refund_card compensation
    "manual_execution",  # 19: a planned compensation nobody can send
)
REASON_FILTER = "reconciliation_inconclusive"
# The raw baseline runs in every fourth round: its medians need fewer samples, and the overview's
# would otherwise double the longest part of the run.
RAW_EVERY = 4


# --- Options ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    effects: int
    reviews: int
    requests: int
    warmup: int
    seed: int
    explain: bool
    keep_db: bool
    reuse_db: bool


def parse_args(argv: list[str]) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--effects", type=int, default=1_000_000, help="effects (1000000)")
    parser.add_argument("--reviews", type=int, default=100_000, help="open review items (100000)")
    parser.add_argument(
        "--requests", type=int, default=200, help="measured requests per page kind (200)"
    )
    parser.add_argument("--warmup", type=int, default=10, help="warm-up requests per kind (10)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the detail-page sample")
    parser.add_argument(
        "--explain",
        action="store_true",
        help="EXPLAIN (ANALYZE, BUFFERS) the slowest query of every page, not only slow ones",
    )
    parser.add_argument("--keep-db", action="store_true", help="keep the benchmark database")
    parser.add_argument(
        "--reuse-db",
        action="store_true",
        help="measure the database a --keep-db run left (migrated first; no build)",
    )
    args = parser.parse_args(argv)
    if args.reviews < 20 or args.requests < 1 or args.warmup < 0:
        parser.error("--reviews must be ≥ 20, --requests ≥ 1, --warmup ≥ 0")
    if not args.reuse_db:
        layout = Layout.of(args.effects, args.reviews)
        if layout.base < 10 * max(layout.old, 1):
            parser.error(
                f"--effects {args.effects} is too few for --reviews {args.reviews}: "
                f"at least {5 * args.reviews} (reviewed effects are half of the newest ones)"
            )
    return Options(
        effects=args.effects,
        reviews=args.reviews,
        requests=args.requests,
        warmup=args.warmup,
        seed=args.seed,
        explain=args.explain,
        keep_db=args.keep_db,
        reuse_db=args.reuse_db,
    )


# --- The dataset -----------------------------------------------------------------------------


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


EFFECT_COLUMNS = """
    id, agent_id, effect_key, run_id, step_id, seq, kind, tool, target, request, request_hash,
    idempotency_key, status, attempt, max_attempts, lease_owner, lease_token, claim_id,
    lease_seconds, lease_expires_at, next_check_at, checks, left_dispatch_at, confirm_deadline,
    provider_ref, response, error, outcome_digest, outcome_token, parent_id, provenance,
    created_at, updated_at, resolved_at, version
"""

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
               (ARRAY['possible_duplicate', 'reconciliation_inconclusive', 'no_lookup',
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

INSERT_REVIEWS = f"""
INSERT INTO reviews_reviewitem
       (effect_id, reason, opened_at, due_at, assignee_id, resolved_at, resolved_by_id,
        resolution, decision_id)
SELECT effect_id, reason, opened_at, opened_at + interval '7 days', assignee_id, resolved_at,
       resolved_by_id, resolution, decision_id
  FROM (SELECT {_id("d.target_g")} AS effect_id, d.reason, d.opened_at,
               %(colleague)s::int AS assignee_id, d.resolved_at,
               %(colleague)s::int AS resolved_by_id,
               d.action || ': checked with the provider' AS resolution,
               {_id("d.dg")} AS decision_id
          FROM plan_decision d
        UNION ALL
        SELECT {_id("r.g")}, r.reason, r.opened_at, r.assignee_id, NULL, NULL, '', NULL
          FROM plan_review r) i
 ORDER BY opened_at
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
       CASE r.reason WHEN 'possible_duplicate' THEN 'found' WHEN 'provider_mismatch' THEN 'mismatch'
                     WHEN 'not_found_unproven' THEN 'not_found' ELSE 'inconclusive' END,
       jsonb_build_object('status', CASE WHEN r.reason = 'possible_duplicate' THEN 'succeeded' END,
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
                 OR (v.n = 4 AND r.reason IN ('reconciliation_inconclusive', 'possible_duplicate',
                                              'provider_mismatch', 'not_found_unproven')) END
 ORDER BY v.at, e.id, v.n
"""

INSERT_RUNS = """
INSERT INTO ledger_run (agent_id, run_id, last_seq, created_at)
SELECT agent_id, run_id, max(seq), min(created_at) FROM ledger_effect GROUP BY agent_id, run_id
"""


def sql_exec(sql: str, params: Any = None) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def sql_rows(sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def people() -> tuple[Any, Any]:
    """The signed-in operator and a colleague (both in the operator role), made if missing."""
    from django.contrib.auth.models import User

    from ledger.roles import OPERATOR as ROLE
    from ledger.roles import grant

    made = []
    for name in (OPERATOR, COLLEAGUE):
        user, _ = User.objects.get_or_create(username=name)
        grant(user, ROLE)
        made.append(user)
    return made[0], made[1]


def build(opts: Options) -> dict[str, float]:
    """Fill the fresh database; returns seconds per step."""
    from ledger.models import Agent

    layout = Layout.of(opts.effects, opts.reviews)
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


# --- The pages and their raw queries ---------------------------------------------------------

RAW_QUEUE = """
SELECT r.*, e.*, a.*, u.*
  FROM reviews_reviewitem r
  JOIN ledger_effect e ON e.id = r.effect_id
  JOIN ledger_agent a ON a.id = e.agent_id
  LEFT JOIN auth_user u ON u.id = r.assignee_id
 WHERE r.resolved_at IS NULL {where}
 ORDER BY {order} LIMIT 50 OFFSET {offset}
"""


def raw_queue(where: str = "", order: str = "r.opened_at, r.id", offset: int = 0) -> str:
    return RAW_QUEUE.format(where=where, order=order, offset=offset)


@dataclass
class PageKind:
    name: str
    goal: bool  # the goal applies (queue and detail)
    path: Callable[[int], str]  # request number → path
    raw_sql: str
    raw_params: Callable[[int], Any]  # request number → parameters of the raw query
    headers: dict[str, str] = field(default_factory=dict)


def page_kinds(me_id: int, sample: list[str]) -> list[PageKind]:
    def fixed(path: str) -> Callable[[int], str]:
        return lambda _: path

    def none(_: int) -> None:
        return None

    return [
        PageKind("queue", True, fixed("/queue/"), raw_queue(), none),
        PageKind(
            f"queue ?page={DEEP_PAGE}",
            True,
            fixed(f"/queue/?page={DEEP_PAGE}"),
            raw_queue(offset=PAGE_SIZE * (DEEP_PAGE - 1)),
            none,
        ),
        PageKind(
            "queue ?tool=send_email",
            True,
            fixed("/queue/?tool=send_email"),
            raw_queue("AND e.tool = 'send_email'"),
            none,
        ),
        PageKind(
            f"queue ?reason={REASON_FILTER}",
            True,
            fixed(f"/queue/?reason={REASON_FILTER}"),
            raw_queue(f"AND r.reason = '{REASON_FILTER}'"),
            none,
        ),
        PageKind(
            "queue ?age=overdue",
            True,
            fixed("/queue/?age=overdue"),
            raw_queue("AND r.due_at < now()"),
            none,
        ),
        PageKind(
            "queue ?assignee=me",
            True,
            fixed("/queue/?assignee=me"),
            raw_queue("AND r.assignee_id = %s"),
            lambda _: [me_id],
        ),
        PageKind(
            "queue ?sort=due",
            True,
            fixed("/queue/?sort=due"),
            raw_queue(order="r.due_at, r.id"),
            none,
        ),
        PageKind(
            "queue htmx partial",
            True,
            fixed("/queue/"),
            raw_queue(),
            none,
            {"HX-Request": "true"},
        ),
        PageKind(
            "effect detail (in review)",
            True,
            lambda n: f"/effects/{sample[n % len(sample)]}/",
            "SELECT * FROM ledger_effectevent WHERE effect_id = %s ORDER BY id",
            lambda n: [sample[n % len(sample)]],
        ),
        PageKind(
            "overview",
            False,
            fixed("/"),
            "SELECT tool, status, count(*) FROM ledger_effect WHERE kind <> 'decision' "
            "GROUP BY tool, status",
            none,
        ),
    ]


def detail_sample(size: int, seed: int) -> list[str]:
    """Effects with an open review item, a random sample in a random order."""
    ids = [
        str(r[0])
        for r in sql_rows(
            "SELECT effect_id FROM reviews_reviewitem WHERE resolved_at IS NULL ORDER BY id"
        )
    ]
    rng = random.Random(seed)
    return rng.sample(ids, min(size, len(ids)))


# --- Measuring -------------------------------------------------------------------------------


@dataclass
class Samples:
    page_ms: list[float] = field(default_factory=list)
    sql_ms: list[float] = field(default_factory=list)  # SQL waits inside each request
    raw_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)  # this process's CPU per request
    pg_ticks: int = 0  # CPU ticks of the page's PostgreSQL backend, all measured requests
    bytes: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class SqlClock:
    """Wall time spent in SQL by this connection, through Django's execute wrapper."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        start = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.seconds += time.perf_counter() - start


def raw_connection(url: str) -> Any:
    """psycopg with client-side binding and no prepared statements, as Django uses it."""
    import psycopg

    return psycopg.connect(url, autocommit=True, cursor_factory=psycopg.ClientCursor)


def request_once(client: Any, kind: PageKind, n: int) -> Any:
    return client.get(kind.path(n), headers=kind.headers)


def backend_ticks(pid: int) -> int:
    """User + system CPU ticks of one process (a PostgreSQL backend), from /proc."""
    raw = Path("/proc", str(pid), "stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


@dataclass
class Machine:
    """How busy the machine was while measuring, and how much of it was this benchmark."""

    seconds: float = 0.0
    busy: float = 0.0  # fraction of all CPUs
    ours: float = 0.0  # this process and the two PostgreSQL backends it talks to


def measure(
    kinds: list[PageKind], client: Any, raw: Any, opts: Options
) -> tuple[dict[str, Samples], Machine]:
    """Rounds in which every kind takes one turn: the page, then (every `RAW_EVERY` rounds) its
    raw query. Besides wall time, the CPU each request cost this process and its PostgreSQL
    backend: on a machine shared with other work those are steadier than wall time."""
    from django.db import connection

    samples = {k.name: Samples() for k in kinds}
    clock = SqlClock()
    backend = sql_rows("SELECT pg_backend_pid()")[0][0]
    raw_backend = raw.info.backend_pid
    total = opts.warmup + opts.requests
    started = time.perf_counter()
    machine = Machine()
    with connection.execute_wrapper(clock), raw.cursor() as cursor:
        for n in range(total):
            if n == opts.warmup:
                before = (
                    time.perf_counter(),
                    machine_ticks(),
                    time.process_time(),
                    backend_ticks(backend) + backend_ticks(raw_backend),
                )
            for kind in kinds:
                clock.seconds = 0.0
                pg_before = backend_ticks(backend)
                cpu_before = time.thread_time()
                start = time.perf_counter()
                response = request_once(client, kind, n)
                page = time.perf_counter() - start
                cpu = time.thread_time() - cpu_before
                pg = backend_ticks(backend) - pg_before
                s = samples[kind.name]
                if response.status_code != 200:
                    s.errors.append(f"{kind.path(n)}: {response.status_code}")
                if n % RAW_EVERY == 0:
                    start = time.perf_counter()
                    cursor.execute(kind.raw_sql, kind.raw_params(n))
                    cursor.fetchall()
                    if n >= opts.warmup:
                        s.raw_ms.append(1000 * (time.perf_counter() - start))
                if n < opts.warmup:
                    continue
                s.page_ms.append(1000 * page)
                s.sql_ms.append(1000 * clock.seconds)
                s.cpu_ms.append(1000 * cpu)
                s.pg_ticks += pg
                s.bytes.append(len(response.content))
            if n + 1 == opts.warmup:
                print(f"  warm-up done ({opts.warmup} requests per kind)", flush=True)
            elif (n + 1 - opts.warmup) % 50 == 0 and n >= opts.warmup:
                print(
                    f"  round {n + 1 - opts.warmup}/{opts.requests} "
                    f"({time.perf_counter() - started:.0f} s)",
                    flush=True,
                )
    wall, (all_ticks, busy_ticks), cpu, pg = before
    all_after, busy_after = machine_ticks()
    machine.seconds = time.perf_counter() - wall
    machine.busy = (busy_after - busy_ticks) / max(all_after - all_ticks, 1)
    ours = time.process_time() - cpu
    ours += (backend_ticks(backend) + backend_ticks(raw_backend) - pg) / CLOCK_TICKS
    machine.ours = ours / (machine.seconds * (os.cpu_count() or 1))
    return samples, machine


@dataclass
class Captured:
    queries: list[int]  # per request
    slowest: list[tuple[float, str]]  # (ms, SQL) of the slowest queries of the slowest request
    items: str  # what the queue page says it matched, or ""
    rows: int  # table rows rendered


_ITEMS = re.compile(rb"(\d+) items?\.")


def capture(kinds: list[PageKind], client: Any, requests: int = 3) -> dict[str, Captured]:
    """Untimed: each page's queries (count and the slowest), and what it showed."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    result = {}
    for kind in kinds:
        counts: list[int] = []
        worst: list[tuple[float, str]] = []
        worst_total = -1.0
        content = b""
        for n in range(requests):
            with CaptureQueriesContext(connection) as context:
                response = request_once(client, kind, n)
            content = response.content
            timed = [(1000 * float(q["time"]), q["sql"]) for q in context.captured_queries]
            counts.append(len(timed))
            total = sum(ms for ms, _ in timed)
            if total > worst_total:
                worst_total, worst = total, sorted(timed, reverse=True)[:3]
        match = _ITEMS.search(content)
        result[kind.name] = Captured(
            queries=counts,
            slowest=worst,
            items=match.group(1).decode() if match else "",
            rows=content.count(b'<tr id="item-') + content.count(b'<tr class="event-'),
        )
    return result


def explain(sql: str) -> list[str]:
    return [r[0] for r in sql_rows(f"EXPLAIN (ANALYZE, BUFFERS) {sql}")]


# --- Results ---------------------------------------------------------------------------------


def percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


@dataclass
class Result:
    page: str
    requests: int
    p50_ms: float
    p95_ms: float
    max_ms: float
    sql_p50_ms: float  # waiting for PostgreSQL, inside the request
    cpu_p50_ms: float  # this process's CPU (Django, ORM, templates)
    cpu_p95_ms: float
    pg_cpu_ms: float  # the PostgreSQL backend's CPU, mean per request
    raw_p50_ms: float
    raw_p95_ms: float
    ratio: float  # page p50 ÷ raw p50
    queries: str
    kb: float
    goal: bool
    errors: list[str]

    @property
    def met(self) -> bool | None:
        return self.p95_ms < GOAL_MS if self.goal else None

    @property
    def cpu_estimate_ms(self) -> float:
        """What the p95 request costs in CPU, Django and PostgreSQL together: about its wall
        time on an otherwise idle machine."""
        return self.cpu_p95_ms + self.pg_cpu_ms


def summarise(kind: PageKind, s: Samples, captured: Captured) -> Result:
    page, raw, cpu = sorted(s.page_ms), sorted(s.raw_ms), sorted(s.cpu_ms)
    low, high = min(captured.queries), max(captured.queries)
    return Result(
        page=kind.name,
        requests=len(page),
        p50_ms=statistics.median(page),
        p95_ms=percentile(page, 0.95),
        max_ms=page[-1],
        sql_p50_ms=statistics.median(s.sql_ms),
        cpu_p50_ms=statistics.median(cpu),
        cpu_p95_ms=percentile(cpu, 0.95),
        pg_cpu_ms=1000 * s.pg_ticks / CLOCK_TICKS / len(page),
        raw_p50_ms=statistics.median(raw),
        raw_p95_ms=percentile(raw, 0.95),
        ratio=statistics.median(page) / statistics.median(raw),
        queries=str(low) if low == high else f"{low}–{high}",
        kb=statistics.median(s.bytes) / 1024,
        goal=kind.goal,
        errors=s.errors[:5],
    )


def print_results(results: list[Result], machine: Machine) -> None:
    rows = [
        (
            r.page,
            f"{r.p50_ms:.1f}",
            f"{r.p95_ms:.1f}",
            f"{r.max_ms:.1f}",
            f"{r.sql_p50_ms:.1f}",
            f"{r.cpu_p50_ms:.1f}",
            f"{r.cpu_p95_ms:.1f}",
            f"{r.pg_cpu_ms:.1f}",
            r.queries,
            f"{r.raw_p50_ms:.2f}",
            f"{r.ratio:.1f}×",
            f"{r.kb:.0f}",
            f"< {GOAL_MS:g}" if r.goal else "reported",
            "–" if r.met is None else ("yes" if r.met else "NO"),
            "–" if not r.goal else ("yes" if r.cpu_estimate_ms < GOAL_MS else "NO"),
        )
        for r in results
    ]
    print()
    print_grid(
        (
            "page",
            "p50 ms",
            "p95 ms",
            "max ms",
            "SQL p50",
            "CPU p50",
            "CPU p95",
            "PG CPU",
            "queries",
            "raw p50",
            "page÷raw",
            "KB",
            "goal p95",
            "met?",
            "by CPU?",
        ),
        rows,
        right_align=True,
    )
    print(
        "\np50/p95/max: server time of the whole request in-process (test Client). SQL p50: "
        "the part of it spent waiting for PostgreSQL. CPU p50/p95: this process's CPU per "
        "request (Django, ORM, templates); PG CPU: its PostgreSQL backend's, mean per request. "
        "raw p50: the page's main query on raw psycopg; page÷raw: ratio of the medians. "
        "by CPU?: CPU p95 + PG CPU < goal, i.e. the goal met on an otherwise idle machine."
    )
    other = max(machine.busy - machine.ours, 0.0)
    print(
        f"\nThe machine during the {machine.seconds:.0f} s measured: {100 * machine.busy:.0f}% "
        f"busy, {100 * machine.ours:.0f}% of it this benchmark (one thread and its backends), "
        f"{100 * other:.0f}% other processes."
    )
    if other > 0.1:
        print(
            "  warning: other work competed for the CPUs; wall times are longer than on a "
            "quiet machine (the CPU columns are steadier)."
        )


def print_queries(kinds: list[PageKind], captured: dict[str, Captured]) -> None:
    print("\nQueries per request (CaptureQueriesContext, untimed pass) and the slowest ones:")
    for kind in kinds:
        c = captured[kind.name]
        shown = f"; says {c.items} items" if c.items else ""
        print(f"  {kind.name}: {c.queries} queries, {c.rows} table rows rendered{shown}")
        for ms, sql in c.slowest:
            print(f"      {ms:7.2f} ms  {_shape(sql)}")


def _shape(sql: str, width: int = 150) -> str:
    text = re.sub(r"\s+", " ", sql).strip()
    return text if len(text) <= width else text[: width - 1] + "…"


def write_result(
    opts: Options,
    results: list[Result],
    machine: Machine,
    dataset: dict[str, Any],
    build_seconds: dict[str, float],
    captured: dict[str, Captured],
    plans: dict[str, list[str]],
) -> None:
    RESULT_FILE.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "code": code_version(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "options": asdict(opts),
        "goal_p95_ms": GOAL_MS,
        "dataset": dataset,
        "build_seconds": build_seconds,
        "machine_during_measurement": asdict(machine),
        "results": [
            {**asdict(r), "met": r.met, "cpu_estimate_ms": r.cpu_estimate_ms} for r in results
        ],
        "queries": {name: asdict(c) for name, c in captured.items()},
        "explain": plans,
    }
    RESULT_FILE.write_text(json.dumps(data, indent=2, default=str) + "\n")
    print(f"\nwritten to {RESULT_FILE.relative_to(ROOT)}")


# --- Entry point -----------------------------------------------------------------------------


def setup_django(env: dict[str, str]) -> None:
    # WhiteNoise warns once that collectstatic has not run: pages here load no static files.
    warnings.filterwarnings("ignore", message="No directory at")
    os.environ.update(
        DATABASE_URL=env["DATABASE_URL"],
        DJANGO_SETTINGS_MODULE="config.settings",
        DJANGO_DEBUG="false",
        LOG_LEVEL="WARNING",
    )
    # Set up as a gunicorn worker is: whatever config.wsgi does at startup (django.setup(), and
    # anything added there later, such as gc.freeze()) shapes the measured requests too.
    import config.wsgi  # noqa: F401


def open_database(opts: Options, base_url: str, name: str) -> dict[str, str]:
    """The environment for a fresh database (migrated, tools loaded), or for the kept one."""
    if not opts.reuse_db:
        env, _ = fresh_database(base_url, name, [])
        return env
    env = {
        **os.environ,
        "DATABASE_URL": database_url(base_url, name),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_DEBUG": "false",
        "LOG_LEVEL": "WARNING",
    }
    manage(env, "migrate", "--verbosity", "0")
    return env


@contextlib.contextmanager
def signed_in_client() -> Iterator[tuple[Any, Any]]:
    from django.test import Client

    me, _ = people()
    client = Client()
    client.force_login(me)
    try:
        yield client, me
    finally:
        client.logout()


def benchmark(opts: Options) -> int:
    base_url = os.environ.get("DATABASE_URL", "")
    if not base_url or not os.environ.get("REDIS_URL"):
        raise SystemExit("DATABASE_URL and REDIS_URL must be set (run it through `make bench`).")
    name = bench_database(base_url, "bench_pages")
    print(
        f"Operator pages benchmark on {os.cpu_count()} CPUs; database {name}; "
        f"code {code_version()}.",
        flush=True,
    )
    with contextlib.ExitStack() as stack:
        if not opts.keep_db and not opts.reuse_db:
            stack.callback(drop_quietly, base_url, name)
        start = time.perf_counter()
        env = open_database(opts, base_url, name)
        setup_django(env)
        from django.db import connections

        stack.callback(connections.close_all)
        build_seconds: dict[str, float] = {"migrate": time.perf_counter() - start}
        if opts.reuse_db:
            print("  reusing the kept database (migrated; not rebuilt)", flush=True)
        else:
            layout = Layout.of(opts.effects, opts.reviews)
            print(
                f"  migrated with tools loaded in {build_seconds['migrate']:.1f} s; building "
                f"{opts.effects} effects ({layout.actions} actions, {layout.decisions} "
                f"decisions, {layout.compensations} compensations), {opts.reviews} open "
                "review items",
                flush=True,
            )
            build_seconds |= build(opts)
            built = sum(v for k, v in build_seconds.items() if k != "migrate")
            build_seconds["total"] = built
            print(f"  dataset built in {built:.1f} s (VACUUM ANALYZE included)", flush=True)
        dataset = describe()
        print(f"  holds: {dataset['counts']}")
        print(f"  effects by status: {dataset['statuses']}")
        print(f"  open items by reason: {dataset['reasons']}")
        print(f"  sizes: {dataset['sizes']}", flush=True)

        client, me = stack.enter_context(signed_in_client())
        kinds = page_kinds(me.id, detail_sample(opts.warmup + opts.requests, opts.seed))
        raw = stack.enter_context(raw_connection(env["DATABASE_URL"]))
        print(
            f"\nMeasuring {len(kinds)} page kinds: {opts.warmup} warm-up + {opts.requests} "
            f"measured requests each, in rounds (each page, then its raw query every {RAW_EVERY} "
            "rounds).",
            flush=True,
        )
        samples, machine = measure(kinds, client, raw, opts)
        captured = capture(kinds, client)
        results = [summarise(k, samples[k.name], captured[k.name]) for k in kinds]

        print_results(results, machine)
        print_queries(kinds, captured)

        plans: dict[str, list[str]] = {}
        for result, kind in zip(results, kinds, strict=True):
            slowest = captured[kind.name].slowest
            if slowest and (opts.explain or result.met is False):
                sql = slowest[0][1]
                plans[kind.name] = explain(sql)
                why = "p95 misses the goal" if result.met is False else "--explain"
                print(f"\nEXPLAIN (ANALYZE, BUFFERS) of {kind.name}'s slowest query ({why}):")
                print(f"  {_shape(sql, 400)}")
                for line in plans[kind.name]:
                    print(f"    {line}")

        missed = [r.page for r in results if r.met is False]
        print(
            f"\nGoal p95 < {GOAL_MS:g} ms for the queue and detail pages: "
            + ("met by every page." if not missed else f"missed by {', '.join(missed)}.")
        )
        write_result(opts, results, machine, dataset, build_seconds, captured, plans)
        errors = [e for r in results for e in r.errors]
        if errors:
            print(f"pages that did not answer 200: {errors}")
            return 1
    return 0


def drop_quietly(base_url: str, name: str) -> None:
    try:
        drop_database(base_url, name)
    except Exception as exc:  # the run's result matters more than the cleanup
        print(f"could not drop {name}: {exc}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    return run_stoppable(lambda: benchmark(opts), restore_sigint=True)


if __name__ == "__main__":
    sys.exit(main())
