"""The crash test's conductor: a fresh database, the ledger's web process, an rq worker and a
sweeper (the production path of reconciliation), the sandbox payments provider and several
workflow workers, all real processes; SIGKILLs at every named point; restarts; then the
verdict of `devstack.crashtest.report`. Options make it a topology of several hosts'
processes on one PostgreSQL and one Redis: N gunicorn instances (the workers spread across
them, failing over as behind a load balancer), M rq workers and a django-q2 cluster.

Crash points: the four in the workers (`devstack.crashtest.worker`), plus the ledger's web
process and the rq worker, killed at random moments and restarted. A killed worker restarts at
once in recovery mode (POST /recovery, then its workflows again). Leases are short (2 s) and the
charge tool's `settle_after` is 3 s, so a run with a hundred crashes takes a minute or two.

The provider (`--provider`) is the sandbox's own payments API in one of three modes, each with
the charge tool declared as it allows (`devstack.harness.CHARGE_TOOLS`), or a real provider's
API through its official SDK against its fake (`--provider stripe`, `slack`, …:
`devstack.crashtest.callers`):

| provider      | sandbox            | what settles what a crash left uncertain                  |
| ------------- | ------------------ | --------------------------------------------------------- |
| `keys`        | honours keys       | a lookup by key; a retry under the same key cannot double |
| `lookup-only` | `--reference-only` | a lookup by reference; a late not-found proves absence    |
| `statement`   | `--ignore-keys`    | the provider's statements, imported as final (below)      |

With `statement`, the workers first leave every uncertain effect in review. The run then waits
until every dispatch window has settled, fetches the provider's statement for the whole run so
far and imports it as final (each effect confirmed, or proven absent and planned again), lets
the workers recover once more (they retry what is planned), waits again and imports a second
statement covering the retries, where a late duplicate would show. The last two kinds of run
must leave no review item for people.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg

from devstack.crashtest import callers, observe
from devstack.crashtest.observe import KEYS, LOOKUP_ONLY, PROVIDERS, STATEMENT
from devstack.crashtest.report import Verdict
from devstack.crashtest.worker import LEASE_SECONDS, WORKER_POINTS
from devstack.embedded import free_port
from devstack.harness import (
    SETTLE_AFTER_SECONDS,
    STATEMENT_SKEW_SECONDS,
    Processes,
    charge_tool_file,
    wait_healthy,
)
from devstack.provision import database_name, fresh_database, manage, manage_argv
from devstack.sandbox.launch import SandboxProcess
from devstack.web import gunicorn_argv
from ledger.models import Effect, EffectEvent, ReviewItem
from ledger.models.states import Status, sql_list
from reconcilers.providers.sandbox_payments.statement import fetch_sandbox_statement

ROOT = Path(__file__).resolve().parents[2]
# Kinds of process; instances are named kind + number ("web0", "rqworker1").
WEB, RQ_WORKER, SWEEPER, QCLUSTER = "web", "rqworker", "sweeper", "qcluster"

# The crash test reads the ledger's database directly, as an outside observer would.
EFFECTS = Effect._meta.db_table
EVENTS = EffectEvent._meta.db_table
REVIEW_ITEMS = ReviewItem._meta.db_table

# The sandbox's flags for each provider, and how long a worker's call to it may take: in the
# last two, the tool's call_timeout (`devstack.harness.CHARGE_TOOLS`).
PROVIDER_ARGS = {KEYS: (), LOOKUP_ONLY: ("--reference-only",), STATEMENT: ("--ignore-keys",)}
PROVIDER_TIMEOUT = {KEYS: 5.0, LOOKUP_ONLY: 2.0, STATEMENT: 2.0}
# A dispatch window runs from its claim − skew to when the effect left dispatching (or its lease
# end, while it has not) + settle_after + skew (`ledger.statements.absence`). A statement is
# final for every window once both have passed, with a margin for the clocks' reading: the last
# claim + the lease + LEFT_SETTLE, and the last departure from dispatching + LEFT_SETTLE. (The
# sweep that moves an expired lease to unknown may run well after the lease ended.)
LEFT_SETTLE = timedelta(seconds=SETTLE_AFTER_SECONDS + STATEMENT_SKEW_SECONDS + 0.5)
WINDOWS_SETTLE = timedelta(seconds=LEASE_SECONDS) + LEFT_SETTLE


@dataclass
class Options:
    workflows: int = 60
    workers: int = 6
    crashes: int = 100
    infra_kills: int = 10  # of the crashes, how many hit the web process and the rq worker
    # The topology: gunicorn instances (each on its own port, the workers spread across
    # them), rq workers, and whether a django-q2 cluster runs the real schedules too.
    web: int = 1
    rq_workers: int = 1
    qcluster: bool = False
    provider: str = KEYS
    ignore_keys: bool = False  # with `keys`: a provider that ignores them after all
    inject_duplicate: bool = False
    timeout: float = 540.0
    seed: int = 7
    # A Redis database of its own, emptied first: no other worker takes these jobs.
    redis_db: int = 14
    report: Path = ROOT / "var" / "crashtest" / "report.json"
    progress: TextIO = sys.stderr


def _redis_db(url: str, db: int) -> str:
    """`url` pointing at database `db` of the same Redis, emptied."""
    import redis

    parts = urlsplit(url)
    if parts.scheme.startswith("redis") and parts.netloc:
        url = urlunsplit(parts._replace(path=f"/{db}"))
    redis.Redis.from_url(url).flushdb()
    return url


class Stack(Processes):
    """The processes of one run, each restartable."""

    def __init__(self, workdir: Path, env: dict[str, str], opts: Options) -> None:
        super().__init__(workdir, env)
        self.opts = opts
        self.ports = {f"{WEB}{n}": free_port() for n in range(opts.web)}
        self.rq_workers = [f"{RQ_WORKER}{n}" for n in range(opts.rq_workers)]
        fake, args = "payments", PROVIDER_ARGS.get(opts.provider, ())
        if opts.provider not in PROVIDERS:
            self.caller = callers.load(opts.provider)
            # Its flags for a ledger at the first web instance (where it delivers callbacks).
            ledger = f"http://127.0.0.1:{next(iter(self.ports.values()))}"
            fake = callers.fake_of(self.caller, opts.provider)
            args = callers.fake_args(self.caller, ledger)
            env.update(getattr(self.caller, "ENV", {}))
        self.provider = SandboxProcess(
            fake,
            workdir / f"{fake}.sqlite3",
            workdir / f"{fake}.log",
            ("--ignore-keys",) if opts.ignore_keys else args,
            env,
        )

    @property
    def provider_url(self) -> str:
        return self.provider.url

    def start_web(self, name: str) -> None:
        # The access log counts the requests each instance served (`served`).
        bind = f"127.0.0.1:{self.ports[name]}"
        options = ("--access-logfile", "-")
        self.spawn(
            name,
            gunicorn_argv("config.wsgi:application", bind, workers=2, threads=4, options=options),
        )
        wait_healthy(self.url_of(name))

    def start_rq_worker(self, name: str) -> None:
        """The production path: wake-ups enqueued after commit, a non-forking rq worker."""
        self.spawn(
            name,
            manage_argv("rqworker", "default", "--worker-class", "reconcilers.worker.LedgerWorker"),
        )

    def start_qcluster(self, name: str = QCLUSTER) -> None:
        """One django-q2 cluster (ORM broker) running the real schedules beside the sweeper:
        its sweep, escalation and sealer take the same rows as everyone else."""
        self.spawn(name, manage_argv("qcluster"))

    def start_sweeper(self, name: str = SWEEPER) -> None:
        """What the django-q2 schedule does every minute, every half second."""
        self.spawn(name, manage_argv("reconcile", "--sweep-only", "--interval", "0.5"))

    def start_all(self) -> None:
        if self.opts.qcluster:
            self.start_qcluster()  # first: its scheduler runs 30 s after the cluster starts
        for name in self.ports:
            self.start_web(name)
        for name in self.rq_workers:
            self.start_rq_worker(name)
        self.start_sweeper()

    def qcluster_round(self, timeout: float = 60.0) -> None:
        """Until the django-q2 cluster has run its schedules once (the first round comes 30 s
        after it starts), so that a short run still has them take part."""
        log = self.workdir / f"{QCLUSTER}.log"
        deadline = time.monotonic() + timeout
        while "Processed '" not in log.read_text(errors="replace"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the django-q2 cluster ran nothing; see {log}")
            time.sleep(0.5)

    def restart(self, name: str) -> None:
        starts = {WEB: self.start_web, RQ_WORKER: self.start_rq_worker}
        starts[name.rstrip("0123456789")](name)

    def url_of(self, web: str) -> str:
        return f"http://127.0.0.1:{self.ports[web]}/api/v1"

    @property
    def ledger_urls(self) -> list[str]:
        return [self.url_of(name) for name in self.ports]

    def served(self) -> dict[str, int]:
        """Requests each web instance answered (its access log, health checks left out), jobs
        each rq worker finished and tasks the django-q2 cluster ran: evidence that every
        process of the topology took part."""
        counts = {}
        for name in self.ports:
            lines = (self.workdir / f"{name}.log").read_text(errors="replace").splitlines()
            counts[name] = sum(" /api/v1/" in line and "/health" not in line for line in lines)
        for name in self.rq_workers:
            text = (self.workdir / f"{name}.log").read_text(errors="replace")
            counts[name] = text.count("Job OK")
        if self.opts.qcluster:
            text = (self.workdir / f"{QCLUSTER}.log").read_text(errors="replace")
            counts[QCLUSTER] = text.count("Processed '")
        return counts

    def stop_all(self) -> None:
        super().stop_all()
        self.provider.kill()


def _prepare_database(env: dict[str, str], provider_url: str, workdir: Path, provider: str) -> str:
    """A fresh database with the charge tool (or a real provider's tool) pointed at this run's
    provider. Points `env` at it and returns the agent's key."""
    if provider in PROVIDERS:
        tools = charge_tool_file(workdir, provider_url, provider)
    else:
        tools = callers.tool_file(workdir, callers.load(provider), provider_url)
    name = f"{database_name(env['DATABASE_URL'])}_crashtest"
    fresh, (key,) = fresh_database(env, name, tools=tools, agents=["crashtest"])
    env.update(fresh)
    return key


def _plan(opts: Options, rng: random.Random) -> list[dict[str, Any]]:
    workflows = [
        {
            "run_id": f"wf-{i:04d}",
            "account": f"acct_{i:04d}",
            "amount": f"{rng.randint(100, 99999) / 100:.2f}",
            "crashes": [],
        }
        for i in range(opts.workflows)
    ]
    # One worker crash point per workflow, the points taken in turn, so that every point is
    # hit about equally; the remaining crashes hit the web process and the reconciler.
    for n in range(min(len(workflows), max(0, opts.crashes - opts.infra_kills))):
        workflows[n]["crashes"].append(WORKER_POINTS[n % len(WORKER_POINTS)])
    return workflows


def _progress(out: TextIO, done: int, total: int, crashes: int, started: float) -> None:
    width = 30
    filled = int(width * done / max(total, 1))
    out.write(
        f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} workflows settled, "
        f"{crashes} crashes, {time.monotonic() - started:5.1f} s"
    )
    out.flush()


def _settled(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        f"SELECT count(*) FROM {EFFECTS} e "
        f"WHERE e.status IN ({sql_list((Status.CONFIRMED, Status.FAILED))}) "
        f"OR EXISTS (SELECT 1 FROM {REVIEW_ITEMS} r WHERE r.effect_id = e.id "
        "AND r.resolved_at IS NULL)"
    ).fetchone()
    return int(row[0]) if row else 0


@contextlib.contextmanager
def _workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="crashtest-") as tmp:
        yield Path(tmp)


def run(opts: Options) -> Verdict:
    rng = random.Random(opts.seed)
    # Short clocks for the run's processes: inconclusive lookups (a provider that ignores keys)
    # reach review after three quick tries instead of hours of backoff.
    # A checker killed mid-check holds its effects for the check lease: keep it short too.
    env = {
        **os.environ,
        "LEDGER_BACKOFF_BASE": "1",
        "LEDGER_BACKOFF_CAP": "2",
        "LEDGER_MAX_CHECKS": "3",
        "LEDGER_CHECK_LEASE": "3",
        "REDIS_URL": _redis_db(os.environ["REDIS_URL"], opts.redis_db),
    }
    with _workdir() as workdir:
        # Where a django-q2 cluster exports the chain head: the run's, not the repository's.
        env["LEDGER_CHAIN_HEAD_FILE"] = str(workdir / "chain-heads.jsonl")
        stack = Stack(workdir, env, opts)
        finished = False
        try:
            verdict = _run(stack, opts, rng, workdir)
            finished = True
            return verdict
        finally:
            stack.stop_all()
            if not finished:
                _keep_logs(workdir, opts.report.parent / "crashtest-logs")


def _keep_logs(workdir: Path, into: Path) -> None:
    """A run that stopped before its verdict keeps its processes' logs beside where the report
    would have been (the working directory goes with the run), and says where."""
    into.mkdir(parents=True, exist_ok=True)
    for log in workdir.glob("*.log"):
        shutil.copyfile(log, into / log.name)
    sys.stderr.write(f"crashtest: the run stopped early; its processes' logs are in {into}\n")


def _run(stack: Stack, opts: Options, rng: random.Random, workdir: Path) -> Verdict:
    stack.provider.start()
    if opts.provider not in PROVIDERS:
        _take_callbacks(stack.env, opts.provider, stack.provider_url)
    key = _prepare_database(stack.env, stack.provider_url, workdir, opts.provider)
    stack.start_all()
    workflows = _plan(opts, rng)
    names = [f"w{n}" for n in range(opts.workers)]
    crash_dir = workdir / "crashed"
    plan_file = workdir / "plan.json"
    plan_file.write_text(
        json.dumps(
            {
                "ledgers": stack.ledger_urls,
                "provider": stack.provider_url,
                "provider_timeout": PROVIDER_TIMEOUT.get(opts.provider, 5.0),
                **_via(opts.provider),
                "key": key,
                "crash_dir": str(crash_dir),
                "workers": {name: workflows[i :: opts.workers] for i, name in enumerate(names)},
            }
        )
    )
    workers = Workers(stack, opts, rng, names, plan_file, crash_dir, len(workflows))
    statements: list[dict[str, Any]] = []
    with psycopg.connect(stack.env["DATABASE_URL"], autocommit=True) as conn:
        began = _database_now(conn)
        workers.drive(conn)
        if opts.provider == STATEMENT:
            # Whatever the workers could not settle waits in review: the provider's record
            # says what happened, then the workers retry what it proved never arrived.
            first_end = _import_statement(stack, conn, began - timedelta(minutes=1), statements)
            workers.drive(conn)
            _import_statement(stack, conn, first_end, statements)
        if opts.provider == LOOKUP_ONLY:
            tail_checks = _await_tail_checks(conn)
        if opts.qcluster:
            stack.qcluster_round()
        if opts.inject_duplicate:
            _charge_behind_the_ledgers_back(stack.provider_url, workflows[0])
        verdict = observe.verdict(
            conn, stack.provider_url, workflows, crash_dir, workers.infra, opts.provider
        )
    verdict.served = stack.served()
    verdict.statements = statements
    if opts.provider == LOOKUP_ONLY:
        verdict.tail_checks = tail_checks
    return verdict


def _take_callbacks(env: dict[str, str], provider: str, provider_url: str) -> None:
    """The fake's callback secret (a signing secret, SendGrid's public key) given to the
    ledger under the tool's webhook_provider, before the web processes start."""
    caller = callers.load(provider)
    secret = callers.callback_secret(caller, provider_url)
    door = caller.TOOL.get("webhook_provider")
    if secret is not None and door:
        given = env.get("LEDGER_WEBHOOK_SECRETS", "")
        env["LEDGER_WEBHOOK_SECRETS"] = ",".join(filter(None, [given, f"{door}:{secret}"]))


def _via(provider: str) -> dict[str, str]:
    """What the workers need to call a real provider's API (nothing for the sandbox's own)."""
    if provider in PROVIDERS:
        return {}
    return {"via": provider, "tool": callers.TOOL_NAME}


def _await_tail_checks(conn: psycopg.Connection[Any], timeout: float = 120.0) -> dict[str, int]:
    """Effects sent again on a proof of absence get one more lookup once they have resolved
    and settled (the sweeper runs them): wait for every one, then count what they found."""
    deadline = time.monotonic() + timeout
    while True:
        row = conn.execute(
            f"SELECT count(*) FROM {EFFECTS} WHERE tail_check_at IS NOT NULL"
        ).fetchone()
        if not row or row[0] == 0:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{row[0]} tail checks still pending after {timeout:.0f} s")
        time.sleep(0.5)
    found = conn.execute(
        f"SELECT CASE WHEN reason = 'duplicate' OR data->>'outcome' = 'duplicate' "
        f"THEN 'duplicate' ELSE 'clean' END, count(*) FROM {EVENTS} "
        "WHERE kind = 'reconciliation' AND (data->>'tail_check')::boolean GROUP BY 1"
    ).fetchall()
    return {what: int(n) for what, n in found}


class Workers:
    """The workflow workers of a run, driven until every one has finished its workflows: a
    killed worker restarts at once in recovery mode, and the web process and the rq worker are
    killed at random moments meanwhile."""

    def __init__(
        self,
        stack: Stack,
        opts: Options,
        rng: random.Random,
        names: list[str],
        plan_file: Path,
        crash_dir: Path,
        workflows: int,
    ) -> None:
        self.stack, self.opts, self.rng, self.names = stack, opts, rng, names
        self.argv = [sys.executable, "-m", "devstack.crashtest.worker", str(plan_file)]
        self.crash_dir = crash_dir
        self.workflows = workflows
        self.infra: Counter[str] = Counter()
        self.started = time.monotonic()

    def drive(self, conn: psycopg.Connection[Any]) -> None:
        """Start every worker (each asks POST /recovery first) and wait until all are done."""
        stack, opts = self.stack, self.opts
        for name in self.names:
            stack.spawn(name, [*self.argv, name])
        next_infra = time.monotonic() + self.rng.uniform(1, 4)
        while True:
            for name in self.names:
                code = stack.procs[name].poll()
                if code == -signal.SIGKILL:
                    stack.spawn(name, [*self.argv, name])  # recovery mode: it asks first
                elif code not in (None, 0):
                    raise RuntimeError(f"worker {name} failed with {code}; see {name}.log")
            running = [n for n in self.names if stack.procs[n].poll() is None]
            if sum(self.infra.values()) < opts.infra_kills and time.monotonic() >= next_infra:
                # The kinds in turn, an instance of the kind at random; counted by kind.
                kind = (WEB, RQ_WORKER)[sum(self.infra.values()) % 2]
                target = self.rng.choice(list(stack.ports) if kind == WEB else stack.rq_workers)
                stack.kill(target)
                self.infra[kind] += 1
                stack.restart(target)
                next_infra = time.monotonic() + self.rng.uniform(1, 4)
            crashed = len(list(self.crash_dir.glob("*"))) if self.crash_dir.exists() else 0
            _progress(
                opts.progress,
                _settled(conn),
                self.workflows,
                crashed + sum(self.infra.values()),
                self.started,
            )
            if not running and all(stack.procs[n].poll() == 0 for n in self.names):
                break
            if time.monotonic() - self.started > opts.timeout:
                raise RuntimeError(f"the run did not settle within {opts.timeout:.0f} s")
            time.sleep(0.25)
        opts.progress.write("\n")


def _database_now(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]


def _import_statement(
    stack: Stack,
    conn: psycopg.Connection[Any],
    period_start: datetime,
    imported: list[dict[str, Any]],
) -> datetime:
    """Once every dispatch window so far has ended (`LEFT_SETTLE`): the provider's statement of
    [period_start, now), fetched as the adapter fetches it and imported as final, as an
    operator would (`manage.py importstatement`); noted in `imported`. The period ends now,
    never in the future; returns its end."""
    dispatching = Status.DISPATCHING.value
    row = conn.execute(
        "SELECT greatest("
        f" (SELECT max(created_at) + %s FROM {EVENTS}"
        f"   WHERE kind = 'transition' AND to_status = '{dispatching}'),"
        f" (SELECT max(created_at) + %s FROM {EVENTS}"
        f"   WHERE kind = 'transition' AND from_status = '{dispatching}'))",
        [WINDOWS_SETTLE, LEFT_SETTLE],
    ).fetchone()
    settled = row[0] if row else None
    while settled is not None and _database_now(conn) <= settled:
        time.sleep(0.2)
    period_end = _database_now(conn)
    filename, content = fetch_sandbox_statement(
        stack.provider_url, period_start, period_end, timeout=10.0
    )
    path = stack.workdir / filename
    path.write_bytes(content)
    output = manage(
        stack.env,
        "importstatement",
        "charge_card",
        str(path),
        "--period-start",
        period_start.isoformat(),
        "--period-end",
        period_end.isoformat(),
    )
    (stack.workdir / f"{filename}.import.log").write_text(output)
    imported.append(
        {
            "period_start": period_start.astimezone(UTC).isoformat(),
            "period_end": period_end.astimezone(UTC).isoformat(),
            "lines": max(0, len(content.splitlines()) - 1),  # less the header
        }
    )
    return period_end


def _charge_behind_the_ledgers_back(provider_url: str, workflow: dict[str, Any]) -> None:
    """The report's self-check: a second charge the ledger never heard of must be caught."""
    httpx.post(
        f"{provider_url}/charges",
        trust_env=False,
        json={"amount": workflow["amount"], "currency": "EUR", "account": workflow["account"]},
    )
