"""The front server (nginx, `config.nginx`) keeps misbehaving clients from starving everyone
else, met as an outsider meets it: through the served stack's public port, with raw sockets
where a well-behaved client library would not misbehave enough.

Each promise here failed against the hand-written front door this replaced: 40 clients that
never read a large answer stalled /health and agents' calls (gunicorn's threads blocked writing
to them); one address's 4,096 idle connections got every other client reset; a chunk-size line
over 64 KiB and an encoded API path got a closed connection instead of an answer.
"""

from __future__ import annotations

import json
import resource
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from config.nginx import HEADER_TIMEOUT
from devstack.embedded import free_port
from devstack.stack import app_services
from devstack.web import web_services
from tests.fixtures.served import Served, serve

# The shared stack (`web`) serves the test database, which only a test marked for it creates.
pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent
PROMISE = 1.0  # seconds /health and an agent's call may take while others misbehave
TRICKLE_EVERY = 2.0
SLOW_REQUEST = b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: yes\r\n\r\n"


def _timed(call) -> tuple[float, int]:
    started = time.monotonic()
    try:
        status = call().status_code
    except httpx.HTTPError:
        status = 0
    return time.monotonic() - started, status


def _health(url: str, source: str = "127.0.0.1") -> tuple[float, int]:
    """A monitor's check from `source`: a new connection, GET /api/v1/health."""
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(transport=transport, timeout=3, trust_env=False) as client:
        return _timed(lambda: client.get(f"{url}/api/v1/health"))


def _intent(url: str, key: str, step: str) -> tuple[float, int]:
    body = {
        "run_id": "front", "step_id": step, "tool": "charge_card", "target": "acct_1",
        "request": {"amount": "1.00", "currency": "EUR"},
    }  # fmt: skip
    headers = {"Authorization": f"Bearer {key}"}
    return _timed(lambda: httpx.post(
        f"{url}/api/v1/effects", json=body, headers=headers, timeout=3, trust_env=False
    ))  # fmt: skip


def _raw(port: int, request: bytes, *, source: str = "127.0.0.1", timeout: float = 10) -> bytes:
    """Send `request` on a new connection and read the answer until the server closes or
    pauses; b"" when the connection was closed without one."""
    with socket.create_connection(
        ("127.0.0.1", port), timeout=timeout, source_address=(source, 0)
    ) as sock:
        sock.sendall(request)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
                if b"\r\n\r\n" in answer and _complete(answer):
                    break
        except (ConnectionResetError, TimeoutError):
            pass
        return answer


def _complete(answer: bytes) -> bool:
    """Whether `answer` holds a whole response: its Content-Length read, or the last chunk of a
    chunked one (a kept-alive connection would otherwise be read until the socket's timeout)."""
    head, _, body = answer.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
        if (name.strip().lower(), value.strip().lower()) == (b"transfer-encoding", b"chunked"):
            return body.endswith(b"0\r\n\r\n")
    return False


def _json_body(answer: bytes) -> dict:
    return json.loads(answer.partition(b"\r\n\r\n")[2])


@pytest.fixture(scope="module")
def web(django_db_setup, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One stack with the default settings, for the tests that only send it requests and leave
    it as they found it (each asserts it is still healthy); the others start their own."""
    with serve(tmp_path_factory.mktemp("web")) as served:
        yield served


@pytest.fixture
def many_files() -> Iterator[None]:
    """Room for thousands of sockets in this process."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_make_run_serves_the_web_through_these_services():
    """The fixture starts what `make run` starts for the web, not a look-alike."""
    port = free_port()
    web = {
        service.name: service.argv
        for service in web_services("127.0.0.1", port, workers=2, threads=4)
    }
    run = {service.name: service.argv for service in app_services("127.0.0.1", port)}
    assert {name: run[name] for name in web} == web
    assert list(web) == ["gunicorn", "nginx"]


def test_health_answers_within_a_second_while_64_clients_trickle_their_headers(web):
    with ExitStack() as hold:
        slow = []
        for _ in range(64):
            sock = hold.enter_context(socket.create_connection(("127.0.0.1", web.port), timeout=5))
            sock.sendall(SLOW_REQUEST[:1])
            slow.append(sock)
        opened = time.monotonic()
        checks = []
        for sent in range(1, 4):
            time.sleep(TRICKLE_EVERY / 2)
            checks.append(_health(web.url))
            time.sleep(TRICKLE_EVERY / 2)
            for sock in slow:
                sock.sendall(SLOW_REQUEST[sent : sent + 1])
        assert [status for _, status in checks] == [200] * len(checks), checks
        assert max(seconds for seconds, _ in checks) < PROMISE, checks
        assert time.monotonic() - opened < HEADER_TIMEOUT  # they were all still hanging

        # The header deadline: a client that has not finished its headers by then is dropped
        # without reaching the application.
        time.sleep(max(0.0, opened + HEADER_TIMEOUT + 1.5 - time.monotonic()))
        for sock in slow:
            try:
                answer = sock.recv(200)
            except ConnectionResetError:
                answer = b""
            assert answer == b"" or answer.startswith(b"HTTP/1.1 408"), answer
        assert _health(web.url)[1] == 200


def test_forty_clients_that_never_read_a_large_answer_stall_nobody(
    served_web, make_agent, tmp_path
):
    """Each of 40 connections asks, pipelined, for a 1.7 MB static file four times (more than
    the kernel's socket buffers hold) and reads nothing. gunicorn hands each answer to nginx at
    once; nginx keeps it (in memory, then a temporary file) for the client that does not read,
    and drops that client after its send timeout."""
    agent = make_agent("front-agent")
    bundle = "vendor/swagger-ui-dist-5.35.0/swagger-ui-bundle.js"
    static_root = tmp_path / "static"
    (static_root / bundle).parent.mkdir(parents=True)
    shutil.copy(ROOT / "static" / bundle, static_root / bundle)
    with served_web({"LEDGER_STATIC_ROOT": str(static_root)}) as web, ExitStack() as hold:
        answer = httpx.get(f"{web.url}/static/{bundle}", timeout=5, trust_env=False)
        assert answer.status_code == 200 and len(answer.content) > 1_500_000
        ask = f"GET /static/{bundle} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode() * 4
        for _ in range(40):
            sock = hold.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window
            sock.settimeout(5)
            sock.connect(("127.0.0.1", web.port))
            sock.sendall(ask)
        time.sleep(1.0)  # every one of them is now stuck behind its unread answers
        checks = []
        for n in range(6):
            checks.append(_health(web.url))
            checks.append(_intent(web.url, agent.key, f"while-stuck-{n}"))
            time.sleep(0.5)
        assert [status for _, status in checks] == [200, 201] * 6, checks
        assert max(seconds for seconds, _ in checks) < PROMISE, checks


def test_thousands_of_idle_connections_from_one_address_do_not_lock_out_another(
    served_web, many_files
):
    """nginx is given room for 512 connections; one address opens 3,000 and leaves them idle,
    some after a request (kept alive), most before sending a byte. Idle connections are
    closed to make room, so another address is still answered, and so is the same address."""
    with served_web({"LEDGER_FRONT_CONNECTIONS": "512"}) as web, ExitStack() as hold:
        idle = []
        for n in range(3000):
            try:
                sock = hold.enter_context(
                    socket.create_connection(("127.0.0.1", web.port), timeout=5)
                )
            except OSError:
                break  # refused or timed out: nginx is at its limit, which is what we test
            if n < 200:  # a request, then kept alive and idle
                sock.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                sock.recv(4096)
            idle.append(sock)
        assert len(idle) > 1000, len(idle)
        checks = [_health(web.url, "127.0.0.2") for _ in range(5)]
        checks += [_health(web.url, "127.0.0.1") for _ in range(2)]
        assert [status for _, status in checks] == [200] * 7, checks
        assert max(seconds for seconds, _ in checks) < PROMISE, checks
        assert "worker_connections are not enough, reusing connections" in web.log_text()


def test_one_address_gets_its_share_of_requests_in_progress_and_the_rest_wait_elsewhere(served_web):
    """Requests whose body has not arrived yet count against their address's share; the next
    one from that address is refused with 429 and Retry-After, another address is served."""
    with served_web({"LEDGER_FRONT_PER_ADDRESS": "4"}) as web, ExitStack() as hold:
        for _ in range(4):
            sock = hold.enter_context(socket.create_connection(("127.0.0.1", web.port), timeout=5))
            sock.sendall(b"POST /api/v1/effects HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
        time.sleep(0.5)
        answer = _raw(web.port, b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 429"), answer[:300]
        assert b"\r\nRetry-After: 1\r\n" in answer
        assert _json_body(answer)["error"] == "too_many_connections"
        assert _health(web.url, "127.0.0.2")[1] == 200


@pytest.mark.parametrize(
    "target",
    [
        b"/api/v1/effects",
        b"/%61pi/v1/effects",
        b"/api%2fv1/effects",
        b"/api%2Fv1/effects",
        b"//api/v1/effects",
        b"/static/../api/v1/effects",
        b"http://127.0.0.1/api/v1/effects",
    ],
)
def test_an_agent_body_over_the_limit_gets_413_body_too_large_on_any_spelling_of_the_path(
    web, target
):
    body = b'{"run_id": "' + b"x" * (2 * 1024 * 1024) + b'"}'
    head = (
        b"POST " + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer elk_x\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
    )
    answer = _raw(web.port, head + body, timeout=30)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert _json_body(answer)["error"] == "body_too_large"
    assert web.healthy()


@pytest.mark.parametrize(
    "size_line",
    [b"f" * 70_000, b"0" * 70_000 + b"1", b"1;" + b"x" * 70_000],
    ids=["overflowing", "zero-padded", "long-extension"],
)
def test_a_chunk_size_line_over_64_kib_gets_an_answer_and_no_traceback(web, size_line):
    request = (
        b"POST /api/v1/effects HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Type: application/json\r\n\r\n" + size_line + b"\r\nx\r\n0\r\n\r\n"
    )
    logged = len(web.log_text())
    answer = _raw(web.port, request)
    assert answer[:12] in (b"HTTP/1.1 400", b"HTTP/1.1 401"), answer[:300]
    assert b"application/json" in answer.partition(b"\r\n\r\n")[0], answer[:300]
    time.sleep(0.3)
    assert "Traceback" not in web.log_text()[logged:]
    assert web.healthy()


def test_requests_and_bodies_pass_through_on_kept_alive_connections(web):
    """One keep-alive client connection, several requests: a GET, a POST with a chunked body
    (read whole, then passed on with its length) and a POST sent with Expect: 100-continue."""
    with httpx.Client(base_url=web.url, timeout=5, trust_env=False) as client:
        assert client.get("/api/v1/health").json()["status"] == "ok"
        chunked = client.post("/api/v1/effects", content=iter([b'{"tool": ', b'"x"}']))
        assert chunked.status_code == 401  # through to the application, which wants a key
        expect = client.post("/api/v1/effects", content=b"{}", headers={"Expect": "100-continue"})
        assert expect.status_code == 401
        assert client.get("/api/v1/health").status_code == 200


def test_while_gunicorn_is_down_agents_get_503_unavailable_with_retry_after(served_web):
    import os
    import signal

    with served_web() as web:
        gunicorn = web.procs["gunicorn"]
        os.killpg(gunicorn.pid, signal.SIGKILL)
        gunicorn.wait(timeout=10)
        request = b"POST /api/v1/effects HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
        # A request may still be written to a kept-alive upstream connection whose close nginx
        # has not yet seen: nginx cannot know it was not read, so it says 502 upstream_lost
        # (repeat it), never a 503 that would claim nothing arrived. Once those are spent, every
        # request finds no one listening: 503.
        for _ in range(5):
            answer = _raw(web.port, request)
            if not answer.startswith(b"HTTP/1.1 502"):
                break
            assert _json_body(answer)["error"] == "upstream_lost", answer[:300]
        assert answer.startswith(b"HTTP/1.1 503"), answer[:300]
        assert b"\r\nRetry-After: 1\r\n" in answer
        assert _json_body(answer)["error"] == "unavailable"


@pytest.mark.parametrize(
    ("request_line", "headers", "status", "code"),
    [
        (b"TRACE /api/v1/health HTTP/1.1", b"", 405, "method_not_allowed"),
        (b"POST /api/v1/effects HTTP/1.1", b"Transfer-Encoding: gzip\r\n", 501, "not_implemented"),
        (b"GET /api/v1/health HTTP/2.0", b"", 505, "http_version_not_supported"),
    ],
    ids=["trace", "transfer-encoding", "http-version"],
)
def test_nginxs_own_refusals_answer_in_the_api_error_shape(
    web, request_line, headers, status, code
):
    request = request_line + b"\r\nHost: 127.0.0.1\r\n" + headers + b"Content-Length: 0\r\n\r\n"
    answer = _raw(web.port, request)
    head = answer.partition(b"\r\n\r\n")[0]
    assert head.split(b" ")[1] == str(status).encode(), answer[:300]
    assert b"application/json" in head, answer[:300]
    assert _json_body(answer)["error"] == code
    assert web.healthy()


def test_the_applications_own_405_passes_through_with_its_allow(web):
    answer = httpx.request("DELETE", f"{web.url}/api/v1/health", timeout=5, trust_env=False)
    assert answer.status_code == 405 and answer.json()["error"] == "method_not_allowed"
    assert "GET" in answer.headers["allow"] and "DELETE" not in answer.headers["allow"]
