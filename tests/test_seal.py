"""The sealer: every committed event gets exactly one seal, in order, whenever it commits.

Tests with a second connection use `transaction=True`: other connections only see committed
rows, which is the very thing the sealer has to cope with.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC

import pytest
from django.db import connection, connections

from config.tasks import DISPATCHER, REGISTRY
from ledger.audit import seal
from ledger.models import Effect, EffectEvent, EventSeal
from reconcilers.schedules import SCHEDULES, ensure_schedules
from tests.factories import add_event, tampering


def chain() -> list[tuple[int, int, str, str]]:
    return list(
        EventSeal.objects.order_by("seq").values_list("seq", "event_id", "prev_hash", "hash")
    )


@contextmanager
def second_connection() -> Iterator:
    """Another session, in a transaction of its own that the test commits when it chooses."""
    other = connections.create_connection("default")
    other.set_autocommit(False)
    try:
        yield other
    finally:
        other.rollback()
        other.close()


def insert_event_in(other, effect: Effect) -> int:
    with other.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ledger_effectevent (effect_id, kind, actor, from_status, to_status, "
            "reason, data, digest, created_at) "
            "VALUES (%s, 'transition', 'slow', 'planned', 'planned', 'slow', '{}'::jsonb, %s, "
            "now()) "
            "RETURNING id",
            [effect.id, hashlib.sha256(b"{}").hexdigest()],
        )
        return cursor.fetchone()[0]


def assert_linked(links: list[tuple[int, int, str, str]]) -> None:
    assert [seq for seq, *_ in links] == list(range(1, len(links) + 1))
    previous = seal.GENESIS
    for _, _, prev_hash, link in links:
        assert prev_hash == previous
        previous = link


def test_sealing_covers_every_event_exactly_once_in_order_across_runs(make_effect):
    effect = make_effect()
    ids = [add_event(effect, f"step {n}") for n in range(7)]

    assert [seal.seal_pending(limit=3) for _ in range(4)] == [3, 3, 1, 0]
    assert [event_id for _, event_id, _, _ in chain()] == ids

    later = [add_event(effect, "later"), add_event(effect, "later still")]
    assert seal.seal_pending() == 2
    links = chain()
    assert [event_id for _, event_id, _, _ in links] == ids + later
    assert_linked(links)
    assert seal.verify().intact


def test_each_hash_covers_the_previous_hash_and_the_events_content_with_its_payload_digest(
    make_effect,
):
    event_id = add_event(make_effect(), "charged", amount="10.10")
    seal.seal_pending()

    event = EffectEvent.objects.get(id=event_id)
    link = EventSeal.objects.get(event_id=event_id)
    covered = {
        "id": event.id,
        "effect_id": str(event.effect_id),
        "kind": "transition",
        "actor": "test",
        "from_status": "planned",
        "to_status": "planned",
        "reason": "charged",
        "digest": event.digest,
        "created_at": event.created_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    }
    text = json.dumps(covered, sort_keys=True, separators=(",", ":"))
    assert link.prev_hash == seal.GENESIS
    assert link.hash == hashlib.sha256((seal.GENESIS + text).encode()).hexdigest()


def test_the_sealer_never_changes_an_event(make_effect):
    effect = make_effect()
    add_event(effect, "one", card="[card:abc]")
    before = list(EffectEvent.objects.order_by("id").values())
    seal.seal_pending()
    assert list(EffectEvent.objects.order_by("id").values()) == before


@pytest.mark.django_db(transaction=True)
def test_an_event_with_a_lower_id_that_commits_after_the_sealer_ran_is_still_sealed(make_effect):
    effect = make_effect()
    with second_connection() as other:
        slow = insert_event_in(other, effect)
        fast = add_event(effect, "fast")
        assert slow < fast

        assert seal.seal_pending() == 1
        other.commit()
        assert seal.seal_pending() == 1

    links = chain()
    assert [event_id for _, event_id, _, _ in links] == [fast, slow]
    assert_linked(links)
    assert seal.verify().intact


@pytest.mark.django_db(transaction=True)
def test_a_sealer_finding_another_at_work_seals_nothing_and_leaves_the_chain_to_it(make_effect):
    add_event(make_effect(), "waiting")
    with second_connection() as other:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [seal._SEALER_LOCK])
        assert seal.seal_pending() == 0
        assert chain() == []
    assert seal.seal_pending() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_sealers_do_not_fork_the_chain_while_agents_keep_writing(make_effect):
    effect = make_effect()
    for n in range(60):
        add_event(effect, f"before {n}")
    barrier = threading.Barrier(7)
    errors: list[BaseException] = []

    def sealer() -> None:
        try:
            barrier.wait()
            for _ in range(30):
                seal.seal_pending(limit=5)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    def agent() -> None:
        try:
            barrier.wait()
            for n in range(60):
                add_event(effect, f"during {n}")
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=sealer) for _ in range(6)]
    threads.append(threading.Thread(target=agent))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seal.seal_all()

    assert errors == []
    links = chain()
    assert len(links) == EffectEvent.objects.count() == 120
    assert len({event_id for _, event_id, _, _ in links}) == 120
    assert_linked(links)
    assert seal.verify().intact


def back_date_seals(minutes: int) -> None:
    with tampering() as cursor:
        cursor.execute(
            "UPDATE ledger_eventseal SET sealed_at = sealed_at - make_interval(mins => %s)",
            [minutes],
        )


@pytest.mark.django_db(transaction=True)
def test_a_sealer_that_was_stopped_for_a_while_still_seals_what_committed_meanwhile(make_effect):
    effect = make_effect()
    with second_connection() as other:
        late = insert_event_in(other, effect)
        add_event(effect, "on time")
        seal.seal_pending()
        other.commit()
    # The sealer's last run was long ago; nothing has been sealed since.
    back_date_seals(30)

    assert seal.seal_pending() == 1
    assert EventSeal.objects.filter(event_id=late).exists()
    assert seal.verify().intact


@pytest.mark.django_db(transaction=True)
def test_events_a_full_batch_left_behind_are_sealed_by_the_next_batch(make_effect):
    effect = make_effect()
    with second_connection() as other:
        first, second = insert_event_in(other, effect), insert_event_in(other, effect)
        add_event(effect, "on time")
        seal.seal_pending()
        back_date_seals(10)
        other.commit()

    assert seal.seal_pending(limit=1) == 1
    assert seal.seal_pending(limit=1) == 1
    assert [event_id for _, event_id, _, _ in chain()][1:] == [first, second]


@pytest.mark.django_db(transaction=True)
def test_a_straggler_open_for_longer_than_the_grace_is_left_for_the_verifier_to_report(
    make_effect,
):
    effect = make_effect()
    with second_connection() as other:
        straggler = insert_event_in(other, effect)
        add_event(effect, "on time")
        seal.seal_pending()
        back_date_seals(10)
        add_event(effect, "ten minutes later")
        seal.seal_pending()
        other.commit()
    with tampering() as cursor:
        cursor.execute(
            "UPDATE ledger_effectevent SET created_at = now() - interval '11 minutes' "
            "WHERE id = %s",
            [straggler],
        )

    # Below the floor now: runs no longer look there, which is what keeps them cheap.
    assert seal.seal_pending() == 0
    verdict = seal.verify()
    assert verdict.intact
    assert (verdict.unsealed_late, verdict.oldest_unsealed_id) == (1, straggler)


def test_seal_all_works_through_a_backlog_in_batches_and_stops_at_its_bound(make_effect):
    effect = make_effect()
    for n in range(25):
        add_event(effect, f"backlog {n}")
    assert seal.seal_all(limit=10, max_batches=2) == 20
    assert seal.seal_all(limit=10) == 5
    assert seal.seal_all(limit=10) == 0
    assert len(chain()) == 25


def test_the_sealer_and_the_head_export_are_scheduled_by_name(db):
    from django_q.models import Schedule

    ensure_schedules()

    assert (SCHEDULES["seal-events"], SCHEDULES["export-chain-head"]) == (1, 60)
    assert REGISTRY.lookup("seal-events") is seal.seal_all
    assert REGISTRY.lookup("export-chain-head") is seal.export_head
    rows = Schedule.objects.filter(name__in=["seal-events", "export-chain-head"])
    assert {(s.name, s.func, s.args) for s in rows} == {
        ("seal-events", DISPATCHER, "'seal-events'"),
        ("export-chain-head", DISPATCHER, "'export-chain-head'"),
    }
