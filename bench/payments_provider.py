"""The payment-loop benchmark's provider: a card-payments API that answers at once.

`POST /charges` with an `Idempotency-Key` header and a JSON body answers 201 with a charge
whose id is derived from the key (the same key always names the same charge, as at a provider
that honours keys); without a key it answers 400, so a contender that forgets the key errors
instead of being measured. Nothing is stored and nothing is awaited: the figures measure the
record-keeping around the call, not the provider.

Why not the repository's sandbox (`devstack/sandbox/payments.py`): it commits every charge
to SQLite with `synchronous=FULL` (an fsync per charge) and may call webhooks back, which is
right for the crash test and wrong for a provider that "answers at once".

HTTP/1.1 with keep-alive (every client keeps one connection for a whole round), Nagle off, and
each answer written in one `send`, so that no delayed-ACK stall lands on any contender. It runs
in a process of its own (`python -m bench.payments_provider --port 0`, started by
`provider_process()`), so its CPU never competes with a client's GIL.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

READY_PREFIX = "payments provider listening on "


class ChargeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless the client says otherwise
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        key = self.headers.get("Idempotency-Key")
        if self.path != "/charges":
            self._answer(404, {"error": {"type": "not_found", "message": self.path}})
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._answer(400, {"error": {"type": "invalid_json", "message": "not JSON"}})
            return
        if not key:
            self._answer(400, {"error": {"type": "missing_key", "message": "Idempotency-Key"}})
            return
        charge_id = "ch_" + hashlib.sha256(key.encode()).hexdigest()[:24]
        self._answer(
            201,
            {
                "id": charge_id,
                "object": "charge",
                "status": "succeeded",
                "amount": body.get("amount"),
                "currency": body.get("currency"),
                "idempotency_key": key,
            },
        )

    def _answer(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        head = (
            f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        ).encode()
        self.wfile.write(head + data)  # one write: no Nagle/delayed-ACK interplay

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a line per request would cost more than the answer


def serve(port: int) -> int:
    """Serve on 127.0.0.1:`port` (0: a free one) until SIGTERM or SIGINT."""
    server = ThreadingHTTPServer(("127.0.0.1", port), ChargeHandler)
    server.daemon_threads = True

    def stop(signum: int, frame: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"{READY_PREFIX}http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever(poll_interval=0.5)
    server.server_close()
    return 0


# --- Started by the benchmark ------------------------------------------------------------------


@dataclass
class ProviderProcess:
    url: str
    proc: subprocess.Popen[str]


@contextlib.contextmanager
def provider_process(timeout: float = 15.0) -> Iterator[ProviderProcess]:
    """The provider in a session of its own on a free port; stopped (with its group) on exit."""
    from bench.harness import ROOT, stop_group

    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.payments_provider", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout
        url = ""
        while not url and time.monotonic() < deadline and proc.poll() is None:
            ready, _, _ = select.select([proc.stdout], [], [], 0.2)
            if ready:
                line = proc.stdout.readline()
                if line.startswith(READY_PREFIX):
                    url = line.removeprefix(READY_PREFIX).strip()
        if not url:
            raise RuntimeError(f"the payments provider did not start (exit {proc.poll()})")
        yield ProviderProcess(url, proc)
    finally:
        stop_group(proc, grace=3)
        if proc.stdout is not None:
            proc.stdout.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one)")
    return serve(parser.parse_args(argv).port)


if __name__ == "__main__":
    sys.exit(main())
