"""The server's keys against the database's memory of them.

`LEDGER_KEYS` is not in the database and must not be: it is escrowed apart, and restored with
it. A restored database started with other keys would derive other idempotency keys for the
same effects (a provider that honours keys would then do them again) and could no longer match
its redaction tokens. So the database keeps a fingerprint of each key version it was used with
(`KeyFingerprint`: an HMAC of a fixed text under the key), and every process compares before it
serves: a version whose fingerprint differs, or the lowest version (which idempotency keys use)
missing from the ring, refuses the start with a message that says so. A version the database has
not seen is recorded.
"""

from __future__ import annotations

import hashlib
import hmac

from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction

from ledger.models import KeyFingerprint

_TEXT = b"effect-ledger key fingerprint"


class KeysMismatch(Exception):
    """The configured LEDGER_KEYS are not the keys this database was used with."""


def fingerprint(secret: bytes) -> str:
    return hmac.new(secret, _TEXT, hashlib.sha256).hexdigest()


def problems(ring: dict[int, bytes] | None = None) -> list[str]:
    """What is wrong with `ring` (the configured keys) for this database; records the
    fingerprints of versions it has not seen. Empty when all is well."""
    ring = settings.LEDGER_KEYS if ring is None else ring
    known = dict(KeyFingerprint.objects.values_list("version", "fingerprint"))
    found = []
    for version, stored in sorted(known.items()):
        if version in ring and not hmac.compare_digest(stored, fingerprint(ring[version])):
            found.append(
                f"LEDGER_KEYS version {version} is not the key this database was used with "
                f"(its fingerprint differs)"
            )
    if known and min(known) not in ring:
        found.append(
            f"LEDGER_KEYS lacks version {min(known)}, from which this database's idempotency "
            f"keys derive"
        )
    if not found:
        for version in sorted(set(ring) - set(known)):
            try:
                with transaction.atomic():
                    KeyFingerprint.objects.create(
                        version=version, fingerprint=fingerprint(ring[version])
                    )
            except IntegrityError:  # another process recorded it first; compared next start
                pass
    return found


def check() -> None:
    """Raise `KeysMismatch` unless the configured keys are this database's. A database that
    cannot be read (not migrated yet, unreachable) is not judged here."""
    try:
        with transaction.atomic():
            found = problems()
    except DatabaseError:
        return
    if found:
        raise KeysMismatch(
            "; ".join(found)
            + ". Start with the LEDGER_KEYS escrowed for this database (see the backup recipe)."
        )
