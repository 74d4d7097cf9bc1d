"""The operator API (docs/operator-api.md): the review queue, one item with the decisions it
offers, and taking a decision, for scripts and tools that act as a person, under
`/api/v1/operator/` in the same OpenAPI document as the agent API.

A caller presents an operator's personal token (`tokens`: made on the API tokens page, scoped,
expiring, revocable, kept as a digest, every use recorded). It acts as that person and never as
more: the person's role and teams are read again on every call, and a decision goes through the
one decision service (`reviews.decisions.decide`, channel "api") with the page's four-eyes,
team, reason and attestation rules. An agent key opens nothing here, and a token opens nothing
of the agent API.

The routes (`endpoints`) parse and answer; what they read is `reads`, a decision `deciding`.
"""
