"""The witness: what the ledger knew a minute ago, kept outside its database.

Every minute the sweep writes a small JSON file (`LEDGER_WITNESS_PATH`, on other storage than
the database) with the database's identity, the chain head, the sequences' high-water marks,
each amount limit's spend of the last 24 hours, the active halts and the revoked key prefixes.
A database restored from a backup, or a replica promoted after asynchronous replication, is
behind that file: it does not hold the witness's chain head, or its sequences are lower, or it
is another cluster, an older timeline, or a newer one the witness saw no synchronous standby
for. Each of these is a *finding*; any finding puts the ledger into restore mode
(`ledger.restore.mode`).

The file is replaced atomically (a temporary file, fsync, rename), so a reader sees the old
witness or the new one, never half of one. It holds no secrets: key prefixes are public parts
of keys, and halts' reasons are what the halts page shows.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from ledger.audit.seal import chain_head
from ledger.models import ApiKey, EventSeal, Halt
from ledger.rules import spend
from ledger.rules.restore_state import lost_since

log = logging.getLogger(__name__)

FORMAT = 1


def path() -> Path | None:
    """Where the witness is kept, or None when no witness is configured."""
    configured = settings.LEDGER_WITNESS_PATH
    return Path(configured) if configured else None


def _one(sql: str) -> Any:
    """One value, or None where the server refuses the function (the pg_control_* functions
    need superuser or pg_monitor): those checks are then skipped, and the log says so."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql)
            row = cursor.fetchone()
        return row[0] if row else None
    except DatabaseError:
        log.warning("witness: %s refused; this check is skipped", sql.split()[1])
        return None


def sequences() -> dict[str, int]:
    """The high-water mark of every sequence of the ledger's schema (`pg_sequences`): event,
    effect-row and halt ids, the configuration version."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT schemaname || '.' || sequencename, COALESCE(last_value, 0) "
            "FROM pg_sequences WHERE schemaname = current_schema() ORDER BY 1"
        )
        return {name: int(value) for name, value in cursor.fetchall()}


def timeline() -> int | None:
    """The timeline the server writes on: the first eight hex digits of the current WAL file's
    name, which move at once with a promotion (the last checkpoint's timeline, which needs
    privileges, only after the next checkpoint). None where neither can be read."""
    name = _one("SELECT pg_walfile_name(pg_current_wal_lsn())")
    if name:
        return int(str(name)[:8], 16)
    found = _one("SELECT timeline_id FROM pg_control_checkpoint()")
    return int(found) if found is not None else None


def synchronous() -> bool:
    """Whether a commit waits for a standby (`synchronous_standby_names` set, and
    `synchronous_commit` at least `on`): then a standby promoted holds every acknowledged
    commit, and a promotion alone loses nothing."""
    names = _one("SELECT current_setting('synchronous_standby_names')")
    level = _one("SELECT current_setting('synchronous_commit')")
    return bool(names) and level in ("on", "remote_write", "remote_apply")


def _instant(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def snapshot() -> dict[str, Any]:
    """What the database holds now, as the witness records it."""
    head = chain_head()
    halts = Halt.objects.filter(resumed_at__isnull=True).order_by("pk")
    return {
        "format": FORMAT,
        "written_at": timezone.now().isoformat(),
        "system_identifier": _one("SELECT system_identifier::text FROM pg_control_system()"),
        "timeline": timeline(),
        "synchronous": synchronous(),
        "chain_head": {"seq": head.seq, "hash": head.hash},
        "sequences": sequences(),
        "spend": spend.spent(),
        "halts": [
            {
                "scope": h.scope,
                "value": h.value,
                "reason": h.reason,
                "halted_by": h.halted_by,
                "since": _instant(h.since),
                "include_compensations": h.include_compensations,
                "teams": h.teams,
            }
            for h in halts
        ],
        "revoked_keys": sorted(
            ApiKey.objects.filter(revoked_at__isnull=False).values_list("prefix", flat=True)
        ),
    }


def write(target: Path | None = None) -> dict[str, Any] | None:
    """Replace the witness with a snapshot of now. None when no witness is configured."""
    target = target or path()
    if target is None:
        return None
    state = snapshot()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=".witness-", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(state, out, sort_keys=True, indent=1)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return state


def controls_changed() -> None:
    """A halt set or resumed, or a key revoked: write the witness once that commits, not at the
    next minute, so that a control set in the last seconds before a loss is set again by
    restore mode. Not while restore mode is on: the witness then keeps the lost branch."""
    if path() is not None:
        transaction.on_commit(_write_if_not_restoring)


def _write_if_not_restoring() -> None:

    try:
        if lost_since() is None:
            write()
    except (OSError, DatabaseError):
        log.exception("witness: not written after a change of controls; the sweep writes it")


class WitnessUnreadable(Exception):
    """The witness exists but is not a witness this ledger wrote: a finding of its own, since
    the check it exists for cannot run."""


def read(source: Path | None = None) -> dict[str, Any] | None:
    """The witness, or None when none is configured or none was written yet."""
    source = source or path()
    if source is None:
        return None
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        state = json.loads(text)
        if state.get("format") != FORMAT:
            raise ValueError(f"format {state.get('format')!r}")
        int(state["chain_head"]["seq"])
        str(state["chain_head"]["hash"])
        dict(state["sequences"])
        datetime.fromisoformat(state["written_at"])
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise WitnessUnreadable(f"{source} is not a ledger witness ({exc})") from None
    return state


@dataclass(frozen=True)
class Finding:
    """One way the database is behind (or other than) what the witness saw."""

    check: str  # identity | timeline | promotion | chain_head | sequence
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"check": self.check, "detail": self.detail}


def _timeline_findings(witness: dict[str, Any]) -> list[Finding]:
    """An older timeline than the witness saw: a restore. A newer one: a standby was promoted,
    which loses the last commits unless the witness saw replication synchronous."""
    now, seen = timeline(), witness.get("timeline")
    if now is None or seen is None or now == int(seen):
        return []
    if now < int(seen):
        return [
            Finding(
                "timeline", f"the database is on timeline {now}, older than the witness's {seen}"
            )
        ]
    if witness.get("synchronous"):
        return []
    return [
        Finding(
            "promotion",
            f"the database moved from timeline {seen} to {now} (a standby promoted) and the "
            "witness saw no synchronous standby: the commits it had not replicated are lost",
        )
    ]


def compare(witness: dict[str, Any]) -> list[Finding]:
    """How the database differs from the witness in a way only going back in time explains.
    Empty when the database holds everything the witness saw."""
    findings: list[Finding] = []
    system = _one("SELECT system_identifier::text FROM pg_control_system()")
    seen_system = witness.get("system_identifier")
    if system and seen_system and system != seen_system:
        findings.append(
            Finding(
                "identity",
                f"the database is cluster {system}; the witness saw cluster {seen_system}",
            )
        )
    findings += _timeline_findings(witness)
    head = witness["chain_head"]
    seq, hash_ = int(head["seq"]), str(head["hash"])
    if seq > 0:
        held = EventSeal.objects.filter(seq=seq).values_list("hash", flat=True).first()
        if held is None:
            findings.append(
                Finding(
                    "chain_head",
                    f"the database does not hold seal {seq}, the witness's chain head "
                    f"(its chain ends at seal {chain_head().seq})",
                )
            )
        elif held != hash_:
            findings.append(
                Finding("chain_head", f"seal {seq} differs from the witness's chain head")
            )
    now = sequences()
    for name, seen in sorted(witness["sequences"].items()):
        if name in now and now[name] < int(seen):
            findings.append(
                Finding(
                    "sequence",
                    f"sequence {name} is at {now[name]}, behind the witness's {seen}",
                )
            )
    return findings
