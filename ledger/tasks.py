"""The ledger's background work, under the names its schedules use (`config.tasks`, ADR 0022).

A name is what PostgreSQL's schedule rows store: it stays when the function it names moves.
"""

from config.tasks import register
from ledger.audit import partitions, retention, seal
from ledger.containment import repeated
from ledger.observability import effectcounts
from ledger.restore import mode
from ledger.statements import held

# The audit trail: every event sealed into the chain, the chain's head kept outside the
# database, the events' partitions made ahead of their month, payloads redacted once their
# tool's retention has passed.
register("seal-events", seal.seal_all)
register("export-chain-head", seal.export_head)
register("event-partitions", partitions.ensure_ahead)
register("retention", retention.redact_expired)

# A request sent twice in one run under two keys.
register("repeated-requests", repeated.flag_recent)

# The witness outside the database: compared, then rewritten; a database found behind it enters
# restore mode, which ends once what it put in doubt is settled.
register("restore-witness", mode.watch)

# The effect counts' deltas folded into their rows: the summary folds before it reads, this
# keeps the deltas few when nobody scrapes.
register("fold-effect-counts", effectcounts.fold)

# Statement lines imported while their effect could not move, looked at again once it can.
register("statement-held-lines", held.revisit)
