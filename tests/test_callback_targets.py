"""Where an agent's callback may go: the URL is checked on the exact string that is stored and
sent, the allow-list holds origins and URL prefixes, and the address a host resolves to is
checked and pinned for the request. Against the API, real PostgreSQL and real HTTP(S)
endpoints on loopback."""

from __future__ import annotations

import ipaddress
import itertools
import json
import os
import shutil
import ssl
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, event, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from ledger.api.callbacktargets import CallbackRefused, allow_list, forbidden, parse, pick_address
from ledger.models import Alert, Effect
from reviews.alerts import callbacks
from reviews.alerts.sender import send_due
from tests.helpers import ROOT
from tests.receivers import Endpoint, self_signed

SECRET = "callback-secret-0123456789abcdef"


@pytest.fixture
def endpoint(settings) -> Iterator[Endpoint]:
    endpoint = Endpoint()
    settings.LEDGER_CALLBACK_ALLOW = [endpoint.origin]
    settings.LEDGER_CALLBACK_SECRET = SECRET
    yield endpoint
    endpoint.close()


def refused(alice, url: str) -> None:
    body = alice.intent(callback_url=url, expect=422)
    assert body["error"] == "validation_error"
    assert "callback_url" in body["fields"], body
    assert not Effect.objects.exists()
    assert not Alert.objects.exists()


# --- The exact string --------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["\r\n", "\n", "\r", "\t", "\x7f", "\x01", "\x00", " ", "\x0b"])
@pytest.mark.parametrize("where", ["path", "start", "end", "host"])
def test_a_control_character_or_whitespace_anywhere_in_a_callback_url_is_refused(
    alice, endpoint, bad, where
):
    # urlsplit drops tabs and line breaks and strips leading controls, so the old check passed
    # on a copy of the URL that was not the one stored and sent.
    url = {
        "path": f"{endpoint.origin}/cb{bad}X-Injected: 1",
        "start": f"{bad}{endpoint.origin}/cb",
        "end": f"{endpoint.origin}/cb{bad}",
        "host": f"http://127.0.0.1{bad}:{endpoint.port}/cb",
    }[where]
    refused(alice, url)


def test_a_line_break_in_a_callback_url_is_refused_over_real_http(live_server, alice, endpoint):
    body = json.dumps(
        {
            "run_id": "run-1",
            "step_id": "step-1",
            "tool": "charge_card",
            "target": "acct_42",
            "request": {"amount": "10.00"},
            "callback_url": f"{endpoint.origin}/cb\r\nX-Injected: 1",
        }
    )
    with httpx.Client(base_url=live_server.url, trust_env=False) as client:
        response = client.post(
            "/api/v1/effects",
            content=body,
            headers={"Authorization": f"Bearer {alice.key}", "Content-Type": "application/json"},
        )
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "validation_error"
    assert "callback_url" in response.json()["fields"]
    assert not Effect.objects.exists()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/cb#fragment",
        "http://127.0.0.1:{port}/cb\\..\\admin",
        "http://127.0.0.1:{port}/a/../cb",
        "http://127.0.0.1:{port}/a/%2e%2e/cb",
        "http://127.0.0.1:{port}/a%2Fcb",
        "http://127.0.0.1:{port}/caf\u00e9",
        "http://2130706433:{port}/cb",
        "http://127.1:{port}/cb",
        "http://127.0.0.1:{port}/cb?q=%zz",
    ],
)
def test_what_a_server_or_the_http_library_would_read_differently_is_refused(alice, endpoint, url):
    refused(alice, url.format(port=endpoint.port))


# --- The allow-list: origins and prefixes ------------------------------------------------------


ALLOW = ["http://127.0.0.1:8001", "https://hooks.example.com/agents/", "https://Pager.example:8443"]


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8001/anything?x=1",
        "http://127.0.0.1:8001",
        "https://hooks.example.com/agents/a1",
        "https://HOOKS.example.com:443/agents/a1/done?x=1",
        "HTTPS://hooks.example.com/agents/",
        "https://pager.example:8443/",
    ],
)
def test_urls_under_an_allowed_origin_or_prefix_are_accepted_and_stored_as_given(
    alice, settings, url
):
    settings.LEDGER_CALLBACK_ALLOW = ALLOW
    settings.LEDGER_CALLBACK_SECRET = SECRET
    effect = alice.intent(callback_url=url)
    assert Effect.objects.get(pk=effect["id"]).callback_url == url


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8002/anything",  # another port of an allowed host
        "http://127.0.0.1/anything",  # its default port
        "https://127.0.0.1:8001/anything",  # another scheme
        "https://hooks.example.com/webhooks/sandbox-pay",  # another path
        "https://hooks.example.com/agents",  # the prefix without its boundary
        "https://hooks.example.com/agentsmith/x",
        "https://hooks.example.com:8443/agents/a1",
        "http://hooks.example.com/agents/a1",
        "https://pager.example/",
        "https://hooks.example.com.evil.example/agents/a1",
    ],
)
def test_another_port_path_or_scheme_of_an_allowed_host_is_refused(alice, settings, url):
    settings.LEDGER_CALLBACK_ALLOW = ALLOW
    settings.LEDGER_CALLBACK_SECRET = SECRET
    refused(alice, url)


def _settings_in_a_new_process(**env: str) -> subprocess.CompletedProcess:
    script = "from django.conf import settings; print(settings.LEDGER_CALLBACK_ALLOW)"
    return subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script],
        cwd=ROOT,
        env={**os.environ, "LEDGER_CALLBACK_SECRET": SECRET, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_old_host_setting_still_works_for_default_ports_only_with_a_warning():
    result = _settings_in_a_new_process(LEDGER_CALLBACK_HOSTS="Hooks.example.com")
    assert result.returncode == 0, result.stderr
    assert "['https://hooks.example.com', 'http://hooks.example.com']" in result.stdout
    assert "LEDGER_CALLBACK_HOSTS is deprecated" in result.stderr


@pytest.mark.parametrize(
    "env",
    [
        {"LEDGER_CALLBACK_ALLOW": "hooks.example.com"},
        {"LEDGER_CALLBACK_ALLOW": "https://hooks.example.com/a?b=1"},
        {"LEDGER_CALLBACK_ALLOW": "https://h.example", "LEDGER_CALLBACK_HOSTS": "h.example"},
    ],
)
def test_a_bare_host_a_query_or_both_settings_at_once_stop_the_process_at_start(env):
    result = _settings_in_a_new_process(**env)
    assert result.returncode != 0
    assert "LEDGER_CALLBACK_ALLOW" in result.stderr


# --- Resolved addresses ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "169.254.169.254",
        "169.254.1.1",
        "fe80::1",
        "fd00:ec2::254",
        "100.100.100.200",
        "::ffff:169.254.169.254",
        "64:ff9b::a9fe:a9fe",
        "0.0.0.0",
        "::",
        "224.0.0.1",
        "ff02::1",
    ],
)
def test_a_host_resolving_to_a_link_local_or_metadata_address_is_refused_unless_listed(address):
    """The check the sender applies to what the host resolved to (no name resolves to these
    addresses on a test machine, so the resolved list is given here; resolving and connecting
    to what was checked is shown with `localhost` below)."""
    ip = ipaddress.ip_address(address)
    allowed = allow_list(["https://hooks.example.com"])
    target = parse("https://hooks.example.com/cb")
    with pytest.raises(CallbackRefused, match="not listed"):
        pick_address(target, [ipaddress.ip_address("10.0.0.7"), ip], allowed)
    literal = f"[{ip.compressed}]" if ip.version == 6 else str(ip)
    listed = allow_list(["https://hooks.example.com", f"http://{literal}:8080"])
    assert pick_address(target, [ip], listed) == ip


def test_ordinary_addresses_pass_the_address_check():
    for address in ("127.0.0.1", "10.1.2.3", "192.168.0.10", "203.0.113.5", "::1", "2001:db8::1"):
        assert forbidden(ipaddress.ip_address(address)) == ""


@pytest.fixture
def localhost_is_127() -> None:
    """The endpoints listen on 127.0.0.1; the sender connects to the first address a name
    resolves to, which for `localhost` may be ::1 on some machines."""
    if callbacks.resolve("localhost", 80)[0] != ipaddress.ip_address("127.0.0.1"):
        pytest.skip("localhost does not resolve to 127.0.0.1 first here")


def test_a_host_name_is_resolved_and_the_request_keeps_its_host_header(
    alice, settings, localhost_is_127
):
    endpoint = Endpoint()
    try:
        settings.LEDGER_CALLBACK_ALLOW = [f"http://localhost:{endpoint.port}/agents/"]
        settings.LEDGER_CALLBACK_SECRET = SECRET
        effect = alice.intent(callback_url=f"http://localhost:{endpoint.port}/agents/a1?x=1")
        alice.claim(effect["id"])
        assert send_due(budget=10) == {"sent": 1, "failed": 0}
    finally:
        endpoint.close()
    [request] = endpoint.received
    assert request.headers["Host"] == f"localhost:{endpoint.port}"
    assert request.path == "/agents/a1?x=1"


def test_over_tls_the_pinned_request_sends_and_verifies_the_host_name(
    alice, settings, tmp_path, monkeypatch, localhost_is_127
):
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command line to make a certificate")
    cert, key = self_signed(tmp_path, "localhost")
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    endpoint = Endpoint(tls)
    # The certificate is trusted the way an operator would trust a private CA.
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    callbacks._tls.cache_clear()
    try:
        settings.LEDGER_CALLBACK_ALLOW = [f"https://localhost:{endpoint.port}"]
        settings.LEDGER_CALLBACK_SECRET = SECRET
        effect = alice.intent(callback_url=f"https://localhost:{endpoint.port}/cb")
        alice.claim(effect["id"])
        assert send_due(budget=10) == {"sent": 1, "failed": 0}
    finally:
        endpoint.close()
        callbacks._tls.cache_clear()
    assert endpoint.server_names == ["localhost"]
    assert endpoint.received[0].headers["Host"] == f"localhost:{endpoint.port}"


# --- The property: refused, or sent exactly as stored -----------------------------------------

_steps = itertools.count()
# Mostly URL characters (so that many examples are accepted and sent), then the same with
# the characters the old check let through or read differently, then any text at all.
_URL_CHARS = list("/?%.:@-_~&=+;,'!$*()aZ09")
_SEGMENT = st.text(alphabet=st.sampled_from(list("-_~&=+;,'!$*().:@aZ09%")), max_size=8)
_PATH = st.lists(_SEGMENT, max_size=4).map(lambda segments: "".join(f"/{s}" for s in segments))
_QUERY = st.one_of(st.just(""), st.text(alphabet=st.sampled_from(_URL_CHARS)).map("?{}".format))
_SUFFIX = st.one_of(
    st.builds("{}{}".format, _PATH, _QUERY),
    st.text(
        alphabet=st.one_of(
            st.sampled_from([*_URL_CHARS, *"#[]\\ \t\r\n\x00\x01\x7f\x85\u2028"]),
            st.characters(),
        ),
        max_size=30,
    ),
)
_PREFIXES = ["http://127.0.0.1:8001", "http://127.0.0.1:8001/", "HTTP://127.0.0.1:8001", "http://"]


@hypothesis_settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    url=st.one_of(
        st.text(max_size=60), st.builds("{}{}".format, st.sampled_from(_PREFIXES), _SUFFIX)
    )
)
def test_any_text_is_refused_or_stored_exactly_as_it_will_be_sent(alice, settings, url):
    settings.LEDGER_CALLBACK_ALLOW = ["http://127.0.0.1:8001"]
    settings.LEDGER_CALLBACK_SECRET = SECRET
    step = f"prop-{next(_steps)}"
    response = alice.post(
        "/effects",
        {
            "run_id": "prop",
            "step_id": step,
            "tool": "charge_card",
            "target": "acct_42",
            "request": {},
            "callback_url": url,
        },
    )
    event("refused" if response.status_code == 422 else "accepted")
    if response.status_code == 422:
        assert "callback_url" in response.json()["fields"]
        assert not Effect.objects.filter(step_id=step).exists()
        return
    assert response.status_code == 201, response.content
    assert Effect.objects.get(step_id=step).callback_url == url
    # What the sender would put on the wire, built by the sender's own code.
    target, address = callbacks.pinned(url)
    with httpx.Client(trust_env=False) as client:
        request = callbacks.pinned_request(client, target, address, b"{}", {})
    sent = request.headers["Host"] + request.url.raw_path.decode("ascii")
    given_rest = url.split("://", 1)[1]
    if not target.path:
        # An empty path is sent as "/", the one thing HTTP itself adds.
        given_rest = given_rest.replace("?", "/?", 1) if "?" in given_rest else given_rest + "/"
    assert sent == given_rest
    # The connection goes to the address that was checked, not to a name resolved again.
    assert request.url.host == str(address) == "127.0.0.1"
