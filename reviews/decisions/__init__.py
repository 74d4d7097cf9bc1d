"""What an operator decides about an effect.

The decision kinds, one declaration each (`kinds`, the shape in `declaration`); which of them
apply where and why the rest are refused (`offer`, `refusals`); taking one (`decide`); what it
will lead to before it is taken (`preview`, built from `whatnext`); why a resend cannot do an
effect twice (`grounds`); the decision the evidence suggests (`suggest`) and that evidence
(`evidence`); four-eyes (`approvals`: who may approve, pending retry proposals; `waiting`: what
waits, as the pages list and count it); and the decision form (`forms`). A decision is recorded
by the ledger as an effect of its own (`ledger.effects.decision_records`)."""
