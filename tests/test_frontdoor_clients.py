"""Whose request it is behind the front door (`config.frontdoor.clients`): the TCP peer,
unless the peer is a trusted proxy; then the last address a trusted hop saw. Sign-in
lockouts count by this address, so a client must never be able to choose it."""

from __future__ import annotations

import pytest

from config.frontdoor.clients import client_address, trusted_proxies

BALANCERS = trusted_proxies("10.0.0.0/8, 192.0.2.7, ::ffff:0:0/96")


def test_without_trusted_proxies_the_peer_is_the_client_whatever_it_sends():
    assert client_address("203.0.113.9", [b"198.51.100.1"], ()) == "203.0.113.9"


def test_a_request_through_a_trusted_balancer_is_counted_under_its_client():
    assert client_address("10.1.2.3", [b"203.0.113.9"], BALANCERS) == "203.0.113.9"
    # Two trusted hops: the right-most address that is not one of ours.
    assert client_address("10.1.2.3", [b"203.0.113.9, 192.0.2.7"], BALANCERS) == "203.0.113.9"


def test_a_client_cannot_choose_its_address_by_sending_the_header_itself():
    # The client wrote "1.2.3.4" itself; the balancer appended the address it saw.
    seen = client_address("10.1.2.3", [b"1.2.3.4, 203.0.113.9"], BALANCERS)
    assert seen == "203.0.113.9"
    # A peer that is not a balancer is never believed.
    assert client_address("203.0.113.9", [b"1.2.3.4"], BALANCERS) == "203.0.113.9"


def test_a_malformed_or_missing_chain_counts_the_request_under_the_proxy():
    assert client_address("10.1.2.3", [b"203.0.113.9, not-an-ip"], BALANCERS) == "10.1.2.3"
    assert client_address("10.1.2.3", [], BALANCERS) == "10.1.2.3"
    assert client_address("10.1.2.3", [b"10.9.9.9"], BALANCERS) == "10.1.2.3"


def test_a_bad_entry_is_named_at_start():
    with pytest.raises(ValueError, match=r"'10\.0\.0\.300'"):
        trusted_proxies("10.0.0.0/8, 10.0.0.300")
    assert trusted_proxies("") == ()
