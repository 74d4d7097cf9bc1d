"""Whose request it is, and what is written about it, through the front server as `make run`
serves it (nginx in front of gunicorn on a Unix socket).

The address that sign-in failures count under is the TCP peer's, unless the peer is one of
LEDGER_TRUSTED_PROXIES: then it is the right-most X-Forwarded-For address that is not itself
trusted. Every request leaves one log line: an API request the application answered is logged
by the application (`ledger.requests`), everything else by nginx (`nginx.access`); gunicorn adds
none, and no line carries a query string."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
import pytest
from axes.models import AccessAttempt

from config.nginx import Limits, render, trusted_proxies

SPOOFED = "203.0.113.9"


def _failed_sign_in(url: str, forwarded_for: str) -> None:
    """One wrong password, sent as a browser would (the form's CSRF token), with
    `forwarded_for` as the X-Forwarded-For header."""
    with httpx.Client(base_url=url, timeout=10, trust_env=False) as browser:
        form = browser.get("/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
        assert token, form.text[:500]
        answer = browser.post(
            "/login/",
            data={"username": "olga", "password": "wrong", "csrfmiddlewaretoken": token[1]},
            headers={"X-Forwarded-For": forwarded_for},
        )
        assert answer.status_code == 200 and "did not match" in answer.text, answer.text[:500]


def _addresses() -> list[str]:
    return sorted(AccessAttempt.objects.values_list("ip_address", flat=True))


def test_without_trusted_proxies_a_forwarded_for_header_is_ignored(served_web, olga):
    with served_web({"LEDGER_TRUSTED_PROXIES": ""}) as web:
        _failed_sign_in(web.url, SPOOFED)
        _failed_sign_in(web.url, f"{SPOOFED}, 198.51.100.7")
    assert _addresses() == ["127.0.0.1"]
    assert AccessAttempt.objects.get().failures_since_start == 2


def test_behind_trusted_proxies_the_right_most_untrusted_address_counts(served_web, olga):
    with served_web({"LEDGER_TRUSTED_PROXIES": "127.0.0.1, 10.0.0.0/8"}) as web:
        # The client claims an address; the balancer appends the one it saw; an inner balancer
        # (trusted) appends its own. The claim to the left of what a trusted hop saw is ignored.
        _failed_sign_in(web.url, f"{SPOOFED}, 198.51.100.7, 10.1.2.3")
        # Only trusted hops: the left-most of them is the best that is known.
        _failed_sign_in(web.url, "10.9.9.9")
    assert _addresses() == ["10.9.9.9", "198.51.100.7"]


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "balancer.internal", "10.0.0.1/8/8"])
def test_a_trusted_proxy_that_is_not_an_address_stops_render_naming_it(entry, tmp_path: Path):
    with pytest.raises(ValueError, match=re.escape(repr(entry))):
        trusted_proxies(f"10.0.0.1, {entry}")


def test_trusted_proxies_become_real_ip_rules_ipv4_also_as_mapped_ipv6(tmp_path: Path):
    limits = Limits(
        api_max_body=1 << 20,
        max_body=1 << 28,
        per_address=128,
        connections=1024,
        workers=1,
        trusted=trusted_proxies("10.0.0.0/8, fd00::/8"),
    )
    conf = render("127.0.0.1:8000", "unix:/tmp/x.sock", tmp_path, limits)
    assert "set_real_ip_from 10.0.0.0/8;" in conf
    assert "set_real_ip_from fd00::/8;" in conf
    assert "set_real_ip_from ::ffff:10.0.0.0/104;" in conf
    assert "real_ip_recursive on;" in conf
    untrusted = render("127.0.0.1:8000", "unix:/tmp/x.sock", tmp_path, limits.__class__(
        **{**limits.__dict__, "trusted": ()}
    ))  # fmt: skip
    assert "set_real_ip_from" not in untrusted and "real_ip_header" not in untrusted


def _json_lines(text: str) -> list[dict]:
    lines = []
    for raw in text.splitlines():
        if raw.startswith("{"):
            try:
                lines.append(json.loads(raw))
            except ValueError:
                pytest.fail(f"a log line that is not JSON: {raw!r}")
    return lines


def test_each_request_leaves_one_line_from_whoever_answered_it(served_web, make_agent):
    agent = make_agent("logger")
    with served_web({"LOG_LEVEL": "INFO"}) as web:
        with httpx.Client(base_url=web.url, timeout=10, trust_env=False) as client:
            assert client.get("/login/?next=/queue&token=secret-query").status_code == 200
            api = client.get(
                "/api/v1/effects?run_id=secret-run",
                headers={"Authorization": f"Bearer {agent.key}", "X-Request-ID": "probe-api"},
            )
            assert api.status_code == 200, api.text
            refused = client.get("/api/v1/health", headers={"X-Big": "x" * 20000})
            assert refused.status_code == 431
            assert refused.json()["error"] == "headers_too_large"
        # nginx writes its line once the answer is sent; give the relay a moment.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            lines = _json_lines(web.log_text())
            front = [line for line in lines if line.get("logger") == "nginx.access"]
            if any("/login/" in line["message"] for line in front) and any(
                line.get("status") == 431 for line in front
            ):
                break
            time.sleep(0.1)

    requests = [line for line in lines if line.get("logger") in ("nginx.access", "ledger.requests")]
    page = [line for line in requests if "/login/" in line["message"]]
    api_lines = [line for line in requests if "/api/v1/effects" in line["message"]]
    too_large = [line for line in requests if line.get("status") == 431]
    assert [line["logger"] for line in page] == ["nginx.access"], page
    assert [line["logger"] for line in api_lines] == ["ledger.requests"], api_lines
    assert api_lines[0]["request_id"] == "probe-api"
    assert [line["logger"] for line in too_large] == ["nginx.access"], too_large
    assert page[0]["status"] == 200 and page[0]["client"] == "127.0.0.1"
    assert isinstance(page[0]["duration_s"], float)
    assert not [line for line in lines if line.get("logger") == "gunicorn.access"]
    # Query strings are left out of every request line.
    for line in requests:
        assert "?" not in line["message"], line
        assert "secret-run" not in json.dumps(line) and "secret-query" not in json.dumps(line)
