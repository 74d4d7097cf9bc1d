"""The long poll's per-agent share: one agent cannot take every place of a process. Past its
share it is answered at once, with the effect as it is and Retry-After, while another agent
still gets a place to wait."""

from __future__ import annotations

import time

from ledger.api import longpoll
from tests.test_notifications import _poll


def test_an_agent_past_its_share_is_answered_at_once_while_another_agent_still_waits(
    transactional_db, alice, bob, settings
):
    settings.LEDGER_MAX_WAITERS = 4  # half of them, 2, for any one agent
    settings.LEDGER_WAITERS_PER_AGENT = 0
    mine = [alice.intent(step_id=f"s{n}") for n in range(3)]
    held = [_poll(alice, effect["id"], wait=30, waiting=n + 1) for n, effect in enumerate(mine[:2])]

    asked = time.monotonic()
    refused = alice.get(f"/effects/{mine[2]['id']}", {"wait": 30})
    assert time.monotonic() - asked < 0.5
    assert refused.status_code == 200 and refused.json()["status"] == "planned"
    assert int(refused["Retry-After"]) >= 1
    assert longpoll.waiting_now() == 2  # the refused poll took no place

    theirs = bob.intent(step_id="b")
    waiting = _poll(bob, theirs["id"], wait=30, waiting=3)
    bob.post(f"/effects/{theirs['id']}/cancel", {})
    waiting.join(10)
    assert waiting.response.status_code == 200 and "Retry-After" not in waiting.response
    assert waiting.response.json()["status"] == "cancelled"

    for effect, poll in zip(mine, held, strict=False):
        alice.post(f"/effects/{effect['id']}/cancel", {})
        poll.join(10)
    assert longpoll.waiting_now() == 0


def test_the_share_is_configurable_and_never_above_the_places(transactional_db, settings):
    settings.LEDGER_WAITERS_PER_AGENT = 0
    assert [longpoll.agent_share(n) for n in (1, 2, 3, 4, 10)] == [1, 1, 1, 2, 5]
    settings.LEDGER_WAITERS_PER_AGENT = 3
    assert [longpoll.agent_share(n) for n in (1, 2, 4, 10)] == [1, 2, 3, 3]
