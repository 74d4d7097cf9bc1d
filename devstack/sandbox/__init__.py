"""Sandbox providers: small, separate HTTP servers that play "the outside world".

`payments` models a card-payment API with idempotency keys and lookups; `messaging` models
a mail/SMS API with neither. Each runs in its own process with its own SQLite store, so a
test, the crash test or `make run` can kill the ledger (or the provider) and look at what the
outside world really did. They use only the standard library and never import Django, so they
start in a fraction of a second: `python -m devstack.sandbox.payments --port 0`.
"""
