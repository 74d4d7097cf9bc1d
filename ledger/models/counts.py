"""Effects counted by (agent, kind, tool, status), kept by PostgreSQL as effects are written
(`ledger/sql/effect_counts.sql`): what `/metrics` and the overview read instead of grouping the
effects table.

A change appends its +1 and -1 to `EffectCountDelta` in the transaction that makes it; a fold
moves the deltas into `EffectCount`, one row per key. The count of a key is its `EffectCount`
row plus its deltas not folded yet (`ledger.observability.effectcounts`). Neither table is
written from Python: no model here has a writer but the SQL.
"""

from __future__ import annotations

from django.db import models


class EffectCount(models.Model):
    """The folded count of one (agent, kind, tool, status)."""

    # A copy of the agent's id, not a foreign key: deleting an agent deletes its effects, whose
    # deletes bring its counts to zero.
    agent_id = models.BigIntegerField()
    kind = models.CharField(max_length=16)
    tool = models.CharField(max_length=100)
    status = models.CharField(max_length=32)
    n = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["agent_id", "kind", "tool", "status"], name="effect_count_key_uniq"
            ),
        ]

    def __str__(self) -> str:
        return f"agent {self.agent_id} {self.kind} {self.tool} {self.status}: {self.n}"


class EffectCountDelta(models.Model):
    """A change of one key's count not folded yet: +1 or -1, appended by the trigger."""

    agent_id = models.BigIntegerField()
    kind = models.CharField(max_length=16)
    tool = models.CharField(max_length=100)
    status = models.CharField(max_length=32)
    n = models.IntegerField()

    def __str__(self) -> str:
        return f"agent {self.agent_id} {self.kind} {self.tool} {self.status}: {self.n:+d}"
