"""The providers' crash test kit: a provider driven through its caller
(`devstack.crashtest.callers`), with agents SIGKILLed around the call and the ledger's own
recovery after them.

`CrashRun` starts the caller's fake (its `FAKE`, `fake_args`, `ENV`), declares the caller's tool
against it through loadtools (with the fake's `FAKE_TIMING`) and gives the ledger the fake's
callback secret. `crash` claims the effects a batch at a time (dispatching under a lease of the
tool's call_timeout, as a claim leaves them) and hands each to an agent forked from one
process that loaded the caller's SDK (`tests.providers.crash_agent`), which dies at its point.
`recover` is what the ledger and a restarted agent do after: leases that ran out are queued,
the due effects checked through the adapter, and what a lookup proved absent (planned again)
is claimed over the agent API, sent once and reported. `tally` counts what came of it.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from django.utils import timezone

from devstack.crashtest import callers
from ledger.models import Effect, EffectEvent, ReviewItem, Tool
from ledger.policy import digests
from ledger.policy.toolfile import load
from reconcilers.reconcile import process_many
from reconcilers.schedules import queue_expired_leases
from tests.helpers import ROOT
from tests.providers.crash_agent import POINTS

LEASE = 2  # seconds: the callers' tools' call_timeout
AT_ONCE = 15  # agents forked together
RESEND_LEASE = 10  # seconds: a restarted agent's claim, long enough for a batch of calls
IN_DOUBT = ("dispatching", "unknown")


def plan(per_point: int, controls: int) -> list[dict[str, Any]]:
    """The workflows: the three points taken in turn, then `controls` that never die."""
    points = [point for _ in range(per_point) for point in POINTS] + ["none"] * controls
    return [
        {"run_id": f"crash-{n:03d}-{point}", "account": f"acct_{n:03d}", "amount": "12.34",
         "point": point}
        for n, point in enumerate(points)
    ]  # fmt: skip


class Agents:
    """The forking agent process and the batches it ran."""

    def __init__(self, name: str, provider_url: str, notes: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.providers.crash_agent", name, provider_url, str(notes)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.read(60) == {"ready": True}

    def read(self, timeout: float) -> Any:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        assert ready, "the crash agent did not answer"
        return json.loads(self.process.stdout.readline())

    def run(self, batch: str, jobs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Each job in a forked child; per job its exit status and the answer it noted."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"batch": batch, "jobs": jobs}) + "\n")
        self.process.stdin.flush()
        return self.read(120)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


@dataclass
class Tally:
    """What came of a run, per run id where it is per effect."""

    kills: Counter[str]
    exits: Counter[int]
    statuses: dict[str, str]
    held: dict[str, int]  # the provider's records of each effect
    stray: int  # the provider's records of no effect of the run
    in_review: dict[str, str]  # the open review's reason
    again: set[str]  # sent again in recovery, after a lookup proved absence
    confirmed_by: dict[str, str]  # agent, reconciler or callback
    answered: dict[str, str]  # the provider reference a killed agent was answered
    refs: dict[str, str]  # the provider reference the ledger holds
    asked_again: int  # effects a restarted agent asked for once everything was settled
    leases_on_asking_again: int

    def extra(self) -> int:
        return self.stray + sum(max(0, n - 1) for n in self.held.values())


class CrashRun:
    def __init__(self, name: str, request: pytest.FixtureRequest) -> None:
        """The run for provider `name`, with the test's fixtures: the ledger live for the
        fake's callbacks, `alice` speaking the agent API in process."""
        fixture = request.getfixturevalue
        self.caller: ModuleType = callers.load(name)
        self.alice, self.make_effect = fixture("alice"), fixture("make_effect")
        for variable, value in dict(getattr(self.caller, "ENV", {})).items():
            fixture("monkeypatch").setenv(variable, value)
        args = callers.fake_args(self.caller, fixture("live_server").url)
        self.fake = fixture("start_sandbox")(callers.fake_of(self.caller, name), *args)
        secret = callers.callback_secret(self.caller, self.fake.url)
        if secret is not None:
            settings = fixture("settings")
            door = self.caller.TOOL["webhook_provider"]
            settings.LEDGER_WEBHOOK_SECRETS = {**settings.LEDGER_WEBHOOK_SECRETS, door: secret}
        self.declare(fixture("tmp_path"))
        self.agents = Agents(name, self.fake.url, fixture("tmp_path") / "notes")
        self.workflows: list[dict[str, Any]] = []
        self.ended: dict[str, dict[str, Any]] = {}
        self.again: set[str] = set()

    def declare(self, directory: Path) -> None:
        load(callers.tool_file(directory, self.caller, self.fake.url))
        timing = callers.fake_timing(self.caller)
        if timing:
            tool = Tool.objects.get(name=callers.TOOL_NAME)
            for field, seconds in timing.items():
                setattr(tool, field, timedelta(seconds=seconds))
            tool.save()

    # --- the crashes ----------------------------------------------------------------------

    def claimed(self, workflow: dict[str, Any]) -> Effect:
        """The workflow's effect as a claim leaves it: dispatching, under a lease as long as
        the tool's call_timeout from now."""
        request = callers.request_for(self.caller, workflow)
        target, effect_key = workflow["account"], f"{workflow['run_id']}:call"
        return self.make_effect(
            "dispatching",
            run_id=workflow["run_id"],
            step_id="call",
            effect_key=effect_key,
            idempotency_key=digests.idempotency_key(self.alice.agent.id, effect_key),
            tool=callers.TOOL_NAME,
            target=target,
            request=request,
            request_hash=digests.request_hash(callers.TOOL_NAME, target, request),
            lease_seconds=LEASE,
            lease_expires_at=timezone.now() + timedelta(seconds=LEASE),
        )

    def crash(self, workflows: list[dict[str, Any]]) -> None:
        """Each workflow's effect claimed and its agent forked, AT_ONCE at a time; what the
        surviving agents were answered is reported as they would."""
        self.workflows = workflows
        for first in range(0, len(workflows), AT_ONCE):
            chunk = workflows[first : first + AT_ONCE]
            effects = {w["run_id"]: self.claimed(w) for w in chunk}
            jobs = [job(w["run_id"], effects[w["run_id"]], w["point"]) for w in chunk]
            ended = self.agents.run("crash", jobs)
            self.ended.update(ended)
            for run_id, end in ended.items():
                if end["exit"] == 0 and "answer" in end:
                    self.report(effects[run_id], effects[run_id].lease_token, end["answer"])

    def report(self, effect: Effect, token: str, answer: dict[str, Any]) -> None:
        """POST /outcome as the agent would (a lease lost meanwhile is the ledger's to sort)."""
        self.alice.post(f"/effects/{effect.id}/outcome", {"lease_token": token, **answer})

    # --- recovery -------------------------------------------------------------------------

    def effects(self) -> dict[str, Effect]:
        run_ids = [w["run_id"] for w in self.workflows]
        return {e.run_id: e for e in Effect.objects.filter(run_id__in=run_ids)}

    def reviewed(self) -> dict[str, str]:
        """The effects left to a person, with the reason."""
        items = ReviewItem.objects.filter(
            effect__run_id__in=[w["run_id"] for w in self.workflows], resolved_at__isnull=True
        )
        return dict(items.values_list("effect__run_id", "reason"))

    def held(self, effects: dict[str, Effect]) -> tuple[dict[str, int], int]:
        """The provider's records per effect, and those of no effect of the run."""
        records = self.caller.records(self.fake.url)
        held = {run_id: records.pop(e.idempotency_key, 0) for run_id, e in effects.items()}
        return held, sum(records.values())

    def settled(self) -> bool:
        """Confirmed where the provider holds the effect; where it holds nothing, confirmed
        after a new attempt or left to a person. Nothing in doubt, nothing planned."""
        effects, reviewed = self.effects(), self.reviewed()
        held, _ = self.held(effects)
        for run_id, effect in effects.items():
            if effect.status == "confirmed" and held[run_id]:
                continue
            if effect.status == "unknown" and run_id in reviewed and not held[run_id]:
                continue
            return False
        return True

    def recover(self, timeout: float) -> None:
        """The ledger's recovery and a restarted agent, until everything is settled (and what
        the provider may still carry out, a held request or its callbacks, has had time to)."""
        started = time.monotonic()
        quiet = started + LEASE + 2
        while time.monotonic() < started + timeout:
            queue_expired_leases()
            process_many([e.id for e in self.effects().values() if e.status in IN_DOUBT])
            planned = [e for e in self.effects().values() if e.status == "planned"]
            if planned:
                for first in range(0, len(planned), AT_ONCE):
                    self.resend(planned[first : first + AT_ONCE])
                continue
            if time.monotonic() > quiet and self.settled():
                return
            time.sleep(0.5)

    def claim(self, effect: Effect, lease_seconds: int) -> str | None:
        """POST /claim as a restarted agent asks it: the lease token, if it was given one."""
        body = {"owner": "crash-agent", "lease_seconds": lease_seconds}
        answer = self.alice.post(f"/effects/{effect.id}/claim", body)
        return answer.json().get("lease_token") if answer.status_code == 200 else None

    def resend(self, planned: list[Effect]) -> None:
        """What a lookup proved absent, claimed, sent once by a fresh agent and reported."""
        tokens = {e.run_id: self.claim(e, RESEND_LEASE) for e in planned}
        effects = {e.run_id: e for e in planned if tokens[e.run_id]}
        jobs = [job(run_id, effect, "none") for run_id, effect in effects.items()]
        for run_id, end in self.agents.run(f"again-{time.monotonic()}", jobs).items():
            self.again.add(run_id)
            if "answer" in end:
                self.report(effects[run_id], str(tokens[run_id]), end["answer"])

    def ask_again(self) -> tuple[int, int]:
        """A restarted agent asks for what a crash left unsent and for what is not confirmed:
        how many it asked for, and how many leases (new sends) it was given."""
        point = {w["run_id"]: w["point"] for w in self.workflows}
        asked = [
            e
            for run_id, e in self.effects().items()
            if point[run_id] == "before" or e.status != "confirmed"
        ]
        return len(asked), sum(1 for e in asked if self.claim(e, LEASE))

    def tally(self) -> Tally:
        asked, leases = self.ask_again()
        effects = self.effects()
        held, stray = self.held(effects)
        point = {w["run_id"]: w["point"] for w in self.workflows}
        answered = {
            run_id: end["answer"].get("provider_ref") or ""
            for run_id, end in self.ended.items()
            if point[run_id] == "after" and end.get("answer", {}).get("status") == "confirmed"
        }
        return Tally(
            kills=Counter(point[r] for r, end in self.ended.items() if end["exit"] == -9),
            exits=Counter(end["exit"] for end in self.ended.values()),
            statuses={run_id: e.status for run_id, e in effects.items()},
            held=held,
            stray=stray,
            in_review=self.reviewed(),
            again=set(self.again),
            confirmed_by=confirmers(effects),
            answered=answered,
            refs={run_id: e.provider_ref or "" for run_id, e in effects.items()},
            asked_again=asked,
            leases_on_asking_again=leases,
        )

    def close(self) -> None:
        self.agents.stop()


def job(run_id: str, effect: Effect, point: str) -> dict[str, Any]:
    """What an agent is handed: the claimed effect's identity and request, and its fate."""
    identity = {"id": str(effect.id), "idempotency_key": effect.idempotency_key}
    return {
        "job": run_id,
        "point": point,
        "effect": {**identity, "target": effect.target},
        "request": dict(effect.request),
    }


def confirmers(effects: dict[str, Effect]) -> dict[str, str]:
    """Who moved each confirmed effect to confirmed: an agent's report, the reconciler's
    lookup or the provider's signed callback."""
    run_of = {e.id: run_id for run_id, e in effects.items()}
    moves = EffectEvent.objects.filter(
        effect_id__in=list(run_of), kind="transition", to_status="confirmed"
    ).values_list("effect_id", "actor")
    return {run_of[effect]: confirmer(actor) for effect, actor in moves}


def confirmer(actor: str) -> str:
    if actor.startswith("agent:"):
        return "agent"
    if actor.startswith("provider:"):
        return "callback"
    return actor.removeprefix("system:")  # reconciler, tail-check, …
