def test_a_payment_goes_from_intent_to_confirmed(alice):
    effect = alice.intent(claim=True, claim_id="c1")
    assert effect["status"] == "dispatching"
    assert effect["attempt"] == 1
    done = alice.outcome(
        effect["id"], effect["lease_token"], provider_ref="ch_1", response={"id": "ch_1"}
    )
    assert done["status"] == "confirmed"
    assert done["provider_ref"] == "ch_1"
    assert "lease_token" not in done
