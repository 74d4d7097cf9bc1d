from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.audit.seal import load_heads, seal_all, verify


class Command(BaseCommand):
    help = (
        "Recompute the audit chain over the event log and name its first broken link. "
        "Events redacted by retention are counted, not reported as altered. It starts from the "
        "latest archive checkpoint, and heads exported from a branch a restore left behind "
        "are counted apart. "
        "Exit status 0 when the chain is intact, 1 when it is not."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--seal", action="store_true", help="Seal pending events first, as the sealer would."
        )
        parser.add_argument(
            "--heads",
            type=Path,
            metavar="FILE",
            help="Also check the chain against the heads exported to FILE (JSON lines).",
        )

    def handle(self, *args: Any, seal: bool, heads: Path | None, **options: Any) -> None:
        if seal:
            self.stdout.write(f"Sealed {seal_all()} pending events.")
        try:
            exported = load_heads(heads) if heads else []
        except (OSError, ValueError) as exc:
            raise CommandError(f"Cannot read the exported heads: {exc}") from None
        verdict = verify(heads=exported)

        head = verdict.head
        self.stdout.write(
            f"Chain head: seal {head.seq}"
            + (f" (event {head.event_id})" if head.event_id else "")
            + f", hash {head.hash}; {verdict.count} seals checked."
        )
        if verdict.start:
            self.stdout.write(
                f"Started from the archive checkpoint at seal {verdict.start} (the months before "
                f"it are archived); {verdict.archived} sealed events past it archived with "
                "their month."
            )
        if heads:
            self.stdout.write(f"Checked against {verdict.heads_checked} exported heads in {heads}.")
        if verdict.heads_before_start:
            self.stdout.write(
                f"{verdict.heads_before_start} exported heads are at or before the checkpoint."
            )
        if verdict.lost_branch_heads:
            self.stdout.write(
                f"{verdict.lost_branch_heads} exported heads belong to the branch a restore left "
                "behind (past its fork, exported before it began): accepted, not checked."
            )
        if verdict.redacted:
            self.stdout.write(
                f"{verdict.redacted} sealed events redacted by retention: their data is gone, "
                "their digests and seals hold."
            )
        if verdict.unsealed_late:
            self.stdout.write(
                self.style.WARNING(
                    f"WARNING: {verdict.unsealed_late} events unsealed for longer than "
                    f"{verdict.grace} seconds (oldest: event {verdict.oldest_unsealed_id})."
                )
            )
        broken = verdict.broken
        if broken is None:
            self.stdout.write(
                self.style.SUCCESS(
                    "INTACT: every seal links to the one before it and matches its event."
                )
            )
            return
        self.stdout.write(
            self.style.ERROR(f"BROKEN at {broken.where}: {broken.problem}: {broken.detail}.")
        )
        if verdict.problems > 1:
            self.stdout.write(f"{verdict.problems} links fail in all; the first is named above.")
        raise CommandError(
            f"The chain is broken at {broken.where}: {broken.problem}.", returncode=1
        )
