"""A real OpenID Connect provider for the tests: django-oauth-toolkit with OIDC on, in a small
Django project of its own, started in its own process (`python -m devstack.idp`, as
`tests/fixtures/idp.py` does) on loopback, with a SQLite database and an RS256 key made at start.

A test drives it through its control endpoint (`control`): people with their groups and teams,
removing a person, and fault modes that make its ID tokens tampered, expired or meant for
another audience (`validator`). Nothing of the ledger is imported here.
"""
