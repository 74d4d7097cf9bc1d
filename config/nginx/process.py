"""nginx as one supervised child: `python -m config.nginx run`.

nginx runs in the foreground (`daemon off`), its master and workers in this process's group,
so a supervisor that kills the group (devstack's, systemd's) stops all of it. Its log lines,
error log and access log alike, arrive on a pipe and leave on stderr as JSON lines in the
application's shape (`ledger.observability.jsonlog`): the access log is JSON already, error
lines are wrapped. Digit runs that could be card numbers are masked on the way, as the
application's own lines are scrubbed.

SIGTERM or SIGINT asks nginx to finish what it is answering (SIGQUIT: no new connections,
requests in progress completed, at most `worker_shutdown_timeout`); if it has not exited after
STOP_GRACE it is told to stop at once. SIGHUP reloads the configuration as rendered at start.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from config.nginx import nginx_binary, prepare, render

STOP_GRACE = 12.0
# "2026/12/05 09:40:00 [error] 123#0: *5 message"
_ERROR_LINE = re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d \[(\w+)\] (?:\d+#\d+: )?(.*)$")
_LEVELS = {
    "debug": "DEBUG", "info": "INFO", "notice": "INFO", "warn": "WARNING",
    "error": "ERROR", "crit": "CRITICAL", "alert": "CRITICAL", "emerg": "CRITICAL",
}  # fmt: skip
# 13 to 19 digits, maybe grouped by spaces or dashes: what a card number looks like.
_CARDISH = re.compile(r"(?<!\d)\d(?:[ -]?\d){12,18}(?!\d)")


def json_line(raw: str) -> str:
    """One line of nginx's stderr as a JSON log line."""
    text = _CARDISH.sub("[digits]", raw.rstrip("\n"))
    if text.startswith("{"):
        return text
    match = _ERROR_LINE.match(text)
    level, message = (_LEVELS.get(match[1], "INFO"), match[2]) if match else ("INFO", text)
    return json.dumps({
        "timestamp": datetime.now(UTC).isoformat(),
        "level": level,
        "logger": "nginx",
        "message": message,
    })  # fmt: skip


def relay(source: IO[bytes], sink: IO[str]) -> None:
    for raw in source:
        sink.write(json_line(raw.decode("utf-8", "replace")) + "\n")
        sink.flush()


def run(listen: str, upstream: str, prefix: Path) -> int:
    """Render the configuration under `prefix`, then run nginx until it exits or is stopped;
    its exit code (128 + the signal for a signal, as a shell reports it)."""
    prefix = prefix.resolve()
    prepare(prefix)
    conf = prefix / "nginx.conf"
    conf.write_text(render(listen, upstream, prefix))
    argv = [nginx_binary(), "-p", str(prefix), "-c", str(conf), "-e", "stderr",
            "-g", "daemon off; master_process on;"]  # fmt: skip
    nginx = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert nginx.stderr is not None
    logs = threading.Thread(target=relay, args=(nginx.stderr, sys.stderr), daemon=True)
    logs.start()
    # Started by the first SIGTERM or SIGINT; a daemon, so that nginx exiting sooner ends this
    # process at once rather than after the grace.
    deadline = threading.Timer(STOP_GRACE, _stop_now, args=(nginx,))
    deadline.daemon = True

    def stop(signum: int, frame: object) -> None:
        if not deadline.is_alive() and not deadline.finished.is_set():
            nginx.send_signal(signal.SIGQUIT)
            deadline.start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, lambda signum, frame: nginx.send_signal(signal.SIGHUP))
    code = nginx.wait()
    deadline.cancel()
    logs.join(timeout=2)
    return 128 - code if code < 0 else code


def _stop_now(nginx: subprocess.Popen[bytes]) -> None:
    if nginx.poll() is None:
        nginx.send_signal(signal.SIGTERM)
