"""Slow clients cannot starve the web server: `/health` answers within a second while 64
connections trickle their headers one byte at a time.

The web server is started as `make run` starts it (`devstack.web.web_services`, which
`devstack.stack.app_services` uses, with its default 2 workers × 4 threads: gunicorn on a Unix
socket behind the front door) on the test database, on loopback. Served by gunicorn alone, the
64 connections hold all eight threads and `/health` is not answered at all.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.db import connection

from config.frontdoor import HEAD_TIMEOUT
from devstack.embedded import free_port
from devstack.provision import database_url
from devstack.stack import app_services
from devstack.web import web_services

ROOT = Path(__file__).resolve().parent.parent
SLOW_CLIENTS = 64
TRICKLE_EVERY = 2.0  # seconds between two bytes of a slow client's headers
PROMISE = 1.0  # seconds /health may take meanwhile
SLOW_REQUEST = b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: yes\r\n\r\n"


@pytest.fixture
def web(transactional_db, tmp_path: Path) -> Iterator[str]:
    """The served web stack on the test database; yields its base URL once /health answers."""
    scratch = tmp_path
    port = free_port()
    services = web_services("127.0.0.1", port, workers=2, threads=4, upstream=scratch / "web.sock")
    env = {
        **os.environ,
        "DATABASE_URL": database_url(os.environ["DATABASE_URL"], connection.settings_dict["NAME"]),
    }
    log = scratch / "web.log"
    procs = []
    with log.open("ab") as out:
        for service in services:
            procs.append(
                subprocess.Popen(
                    service.argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not _healthy(url):
            assert all(proc.poll() is None for proc in procs), log.read_text()[-2000:]
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.1)
        yield url
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=15)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/v1/health", timeout=1, trust_env=False).is_success
    except httpx.HTTPError:
        return False


def _timed_health(url: str) -> tuple[float, int]:
    """A monitor's check: a new connection, GET /api/v1/health; (seconds, status)."""
    started = time.monotonic()
    try:
        status = httpx.get(f"{url}/api/v1/health", timeout=3, trust_env=False).status_code
    except httpx.HTTPError:
        status = 0
    return time.monotonic() - started, status


def test_make_run_serves_the_web_through_these_services():
    """The fixture starts what `make run` starts for the web, not a look-alike."""
    port = free_port()
    services = web_services("127.0.0.1", port, workers=2, threads=4)
    web = {service.name: service.argv for service in services}
    run = {service.name: service.argv for service in app_services("127.0.0.1", port)}
    assert {name: run[name] for name in web} == web


def test_health_answers_within_a_second_while_64_clients_trickle_their_headers(web):
    port = int(web.rsplit(":", 1)[1])
    slow = []
    try:
        for _ in range(SLOW_CLIENTS):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.sendall(SLOW_REQUEST[:1])
            slow.append(sock)
        opened = time.monotonic()
        checks = []
        for sent in range(1, 5):  # four checks, one per trickle, ~8 s of hanging clients
            time.sleep(TRICKLE_EVERY / 2)
            checks.append(_timed_health(web))
            time.sleep(TRICKLE_EVERY / 2)
            for sock in slow:
                sock.sendall(SLOW_REQUEST[sent : sent + 1])
        assert [status for _, status in checks] == [200] * len(checks), checks
        assert max(seconds for seconds, _ in checks) < PROMISE, checks
        assert time.monotonic() - opened < HEAD_TIMEOUT  # they were all still hanging

        # The header deadline: a client that has not finished its headers by then is answered
        # 408 and its connection closed.
        time.sleep(max(0.0, opened + HEAD_TIMEOUT + 1.0 - time.monotonic()))
        answers = [sock.recv(200) for sock in slow]
        assert all(answer.startswith(b"HTTP/1.1 408 ") for answer in answers), answers[:3]
    finally:
        for sock in slow:
            sock.close()
    assert _timed_health(web)[1] == 200


def test_requests_and_bodies_pass_through_on_kept_alive_connections(web):
    """One keep-alive client connection, several requests: a GET, a POST with a chunked body
    (decoded and passed on with its length) and a POST sent with Expect: 100-continue."""
    with httpx.Client(base_url=web, timeout=5, trust_env=False) as client:
        assert client.get("/api/v1/health").json()["status"] == "ok"
        chunked = client.post(
            "/api/v1/effects", content=iter([b'{"tool": ', b'"x"}']), headers={"X-A": "1"}
        )
        assert chunked.status_code == 401  # through to the application, which wants a key
        expect = client.post("/api/v1/effects", content=b"{}", headers={"Expect": "100-continue"})
        assert expect.status_code == 401
        assert client.get("/api/v1/health").status_code == 200


def test_the_client_address_comes_from_the_front_door_only_over_the_unix_socket():
    from config.wsgi import client_address  # loading it starts Django's WSGI handler

    seen = []

    def app(environ, start_response):
        seen.append(environ["REMOTE_ADDR"])
        return [b""]

    wrapped = client_address(app)
    # Through the front door (gunicorn on a Unix socket gives an empty REMOTE_ADDR).
    wrapped({"REMOTE_ADDR": "", "HTTP_X_FORWARDED_FOR": "203.0.113.9"}, None)
    # A client talking to gunicorn over TCP cannot choose its address.
    wrapped({"REMOTE_ADDR": "198.51.100.4", "HTTP_X_FORWARDED_FOR": "203.0.113.9"}, None)
    assert seen == ["203.0.113.9", "198.51.100.4"]


def test_an_oversized_body_gets_the_applications_413_through_the_front_door(web):
    """gunicorn's worker refuses an agent API body over LEDGER_MAX_BODY_BYTES before reading it
    and closes the connection under the front door's write, which lost its answer: the front
    door refuses such a body itself, with the application's answer."""
    body = b'{"run_id": "' + b"x" * (3 * 1024 * 1024) + b'"}'
    for _ in range(3):
        response = httpx.post(
            f"{web}/api/v1/effects",
            content=body,
            headers={"Content-Type": "application/json", "Authorization": "Bearer elk_x"},
            timeout=30,
            trust_env=False,
        )
        assert response.status_code == 413, response.text
        assert response.json()["error"] == "body_too_large"
    assert _healthy(web)
