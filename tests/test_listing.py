"""GET /effects and the run journal: filters and keyset pagination."""

from __future__ import annotations


def _walk(alice, path: str, params: dict) -> list[dict]:
    items, cursor = [], None
    while True:
        query = dict(params, **({"cursor": cursor} if cursor else {}))
        response = alice.get(path, query)
        assert response.status_code == 200, response.content
        page = response.json()
        assert len(page["items"]) <= params["limit"]
        items += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            return items


def test_pages_cover_every_effect_exactly_once(alice):
    ids = {alice.intent(step_id=f"s{i}")["id"] for i in range(23)}
    items = _walk(alice, "/effects", {"limit": 5})
    assert {item["id"] for item in items} == ids
    assert len(items) == 23


def test_filters_narrow_the_list(alice):
    a = alice.intent(run_id="r1", step_id="a", tool="get_balance", request={})
    b = alice.intent(run_id="r2", step_id="b", claim=True, owner="w-9")
    assert [i["id"] for i in alice.get("/effects", {"run_id": "r1"}).json()["items"]] == [a["id"]]
    assert [i["id"] for i in alice.get("/effects", {"owner": "w-9"}).json()["items"]] == [b["id"]]
    assert [i["id"] for i in alice.get("/effects", {"status": "dispatching"}).json()["items"]] == [
        b["id"]
    ]
    assert [i["id"] for i in alice.get("/effects", {"tool": "get_balance"}).json()["items"]] == [
        a["id"]
    ]
    assert [i["id"] for i in alice.get("/effects", {"step_id": "b"}).json()["items"]] == [b["id"]]


def test_the_journal_replays_a_run_in_seq_order_with_recorded_results(alice):
    first = alice.intent(step_id="plan", tool="get_balance", request={}, claim=True)
    alice.outcome(first["id"], first["lease_token"], response={"balance": 12})
    second = alice.intent(step_id="pay", claim=True)
    alice.outcome(second["id"], second["lease_token"], provider_ref="ch_1")
    comp = alice.post(f"/effects/{second['id']}/compensate", {"request": {}}).json()
    alice.intent(run_id="other-run", step_id="x")

    items = _walk(alice, "/runs/run-1/journal", {"limit": 2})
    assert [i["id"] for i in items] == [first["id"], second["id"], comp["id"]]
    assert [i["seq"] for i in items] == [1, 2, 3]
    assert items[0]["response"] == {"balance": 12}
    assert items[2]["parent_id"] == second["id"]


def test_the_journal_of_an_unknown_run_is_empty(alice):
    response = alice.get("/runs/never/journal")
    assert response.status_code == 200
    assert response.json() == {"items": [], "next_cursor": None}
