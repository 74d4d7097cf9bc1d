"""The lost-window drills' verdict: the providers' own records against the ledger's, after the
database went back in time and everyone recovered.

- **duplicates**: an account charged more than once (each run charges an account of its own),
  or a charge refunded more than once (each refund the operator decided is one refund, decided
  twice: before the loss and after it);
- **unaccounted**: a charge or refund a provider holds that no effect names (by the provider's
  reference or by the idempotency key the provider kept) and no incident raised;
- **lost**: a run an agent was told was confirmed whose effect did not end confirmed (or
  compensated, where the operator refunded it), or a refund
  decided before the loss with no confirmed refund of the same charge at the end.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import httpx

from devstack.provision import ManageFailed, manage

if TYPE_CHECKING:
    from devstack.drills.lostwindow import LostWindowDrill, Window


def provider_records(url: str) -> list[dict[str, Any]]:
    body = httpx.get(f"{url}/_sandbox/transactions", timeout=10, trust_env=False).json()
    return list(body.get("data", body) if isinstance(body, dict) else body)


def _keys_of(record: dict[str, Any]) -> set[str]:
    """Every key the provider kept for a record, whatever it shows of it."""
    found = {
        record.get(name) for name in ("idempotency_key", "received_idempotency_key", "reference")
    }
    return {str(key) for key in found if key}


def _unaccounted(drill: LostWindowDrill, records: list[dict[str, Any]]) -> list[str]:
    refs, keys = set(), set()
    for ref, key in drill.sql("SELECT provider_ref, idempotency_key FROM ledger_effect"):
        refs.add(ref)
        keys.add(key)
    incidents = {
        ref for (ref,) in drill.sql(
            "SELECT l.provider_ref FROM ledger_incident i "
            "JOIN ledger_statementline l ON l.id = i.line_id"
        )
    }  # fmt: skip
    return [
        r["id"]
        for r in records
        if r["id"] not in refs and r["id"] not in incidents and not (_keys_of(r) & keys)
    ]


def _lost(drill: LostWindowDrill, window: Window) -> tuple[int, int]:
    final = {
        run_id: status
        for run_id, status in drill.sql(
            "SELECT run_id, status FROM ledger_effect WHERE kind = 'action'"
        )
    }
    runs = sum(
        1 for agent in drill.agents for run in agent.journal
        if run.told_confirmed and final.get(run.run_id) not in ("confirmed", "compensated")
    )  # fmt: skip
    refunded = {
        parent for (parent,) in drill.sql(
            "SELECT parent_id::text FROM ledger_effect WHERE kind = 'compensation' "
            "AND status = 'confirmed'"
        )
    }  # fmt: skip
    decided = [r["effect"] for r in window.refunds if "compensation" in r]
    return runs, sum(1 for parent in decided if parent not in refunded)


def _story(drill: LostWindowDrill, run_id: str) -> list[Any]:
    """The ledger's side of a run that did not end: its effects' moves, and open items."""
    return drill.sql(
        "SELECT e.status, ev.kind, ev.from_status, ev.to_status, ev.reason, ev.actor, "
        "ev.created_at::time, (SELECT string_agg(r.reason, ',') FROM reviews_reviewitem r "
        "WHERE r.effect_id = e.id AND r.resolved_at IS NULL) "
        "FROM ledger_effect e JOIN ledger_effectevent ev ON ev.effect_id = e.id "
        "WHERE e.run_id = %s ORDER BY ev.id",
        [run_id],
    )


def _controls(drill: LostWindowDrill, keys: list[str]) -> dict[str, bool]:
    assert drill.stack is not None
    api = drill.stack.api_url
    intent = {
        "run_id": "after-restore", "step_id": "wire", "tool": "wire_transfer", "target": "x",
        "request": {"note": "drill"}, "claim": True, "owner": "drill",
    }  # fmt: skip
    halted = httpx.post(
        f"{api}/effects", json=intent, headers={"Authorization": f"Bearer {keys[0]}"},
        timeout=10, trust_env=False,
    )  # fmt: skip
    revoked = httpx.get(
        f"{api}/effects", params={"run_id": "x"}, headers={"Authorization": f"Bearer {keys[1]}"},
        timeout=10, trust_env=False,
    )  # fmt: skip
    try:
        manage(drill.env, "verifyledger")
        verified = True
    except ManageFailed as exc:
        drill.say(f"verifyledger failed:\n{exc}")
        verified = False
    return {
        "halt in force again": halted.status_code == 409 and halted.json().get("error") == "halted",
        "revoked key refused again": revoked.status_code == 401,
        "verifyledger passes": verified,
    }


def score(
    drill: LostWindowDrill, window: Window, again: list[dict[str, Any]], keys: list[str]
) -> None:
    report = drill.report
    assert drill.stack is not None
    records = {kind: provider_records(p.url) for kind, p in drill.stack.providers.items()}
    every = [r for found in records.values() for r in found]
    charges = Counter(r["account"] for r in every if r["object"] == "charge")
    refunds = Counter(r["charge"] for r in every if r["object"] == "refund")
    runs = [run for agent in drill.agents for run in agent.journal]
    lost_runs, lost_refunds = _lost(drill, window)
    unaccounted = _unaccounted(drill, every)
    if unaccounted:
        drill.say(f"unaccounted provider records: {unaccounted[:10]}")
    windows = drill.sql("SELECT source, applied->'in_doubt' FROM ledger_restorewindow ORDER BY id")
    report.counts.update(
        {
            "runs": len(runs),
            "runs by end": dict(Counter(run.state for run in runs)),
            "provider charges": sum(charges.values()),
            "provider refunds": sum(refunds.values()),
            "refunds decided in the window": sum("compensation" in r for r in window.refunds),
            "refunds decided again": dict(
                Counter(r.get("status") or r.get("refused") for r in again)
            ),
            "restore windows (source, put in doubt)": [list(w) for w in windows],
            "incidents": drill.sql("SELECT count(*) FROM ledger_incident")[0][0],
            "incidents still open": drill.sql(
                "SELECT count(*) FROM ledger_incident WHERE acknowledged_at IS NULL"
            )[0][0],
            "acknowledged": sum(len(run.acked) for run in runs)
            + sum("compensation" in r for r in [*window.refunds, *again]),
            "lost": lost_runs + lost_refunds,
            "lost runs": lost_runs,
            "lost refunds": lost_refunds,
            "duplicate charges": sum(1 for n in charges.values() if n > 1),
            "duplicate refunds": sum(1 for n in refunds.values() if n > 1),
            "unaccounted": len(unaccounted),
        }
    )
    report.counts["duplicates"] = (
        report.counts["duplicate charges"] + report.counts["duplicate refunds"]
    )
    for name in ("lost", "duplicates", "unaccounted"):
        report.expect_count(name, 0)
    report.expect(
        "restore mode entered by itself",
        report.counts["restore mode entered after (s)"] is not None,
    )
    unended = [run for run in runs if run.state not in ("confirmed", "failed")]
    report.expect("every run ended", not unended, str(report.counts["runs by end"]))
    for run in unended[:5]:
        drill.say(f"run {run.run_id} ({run.tool}) ended {run.state}: {_story(drill, run.run_id)}")
    for check, ok in _controls(drill, keys).items():
        report.counts[check] = ok
        report.expect(check, ok)


def summary_line(report: Any) -> str:
    c = report.counts
    return (
        f"drill {report.drill}: acknowledged {c.get('acknowledged', 0)}, lost {c.get('lost', 0)}, "
        f"duplicates {c.get('duplicates', 0)}, unaccounted {c.get('unaccounted', 0)}"
    )
