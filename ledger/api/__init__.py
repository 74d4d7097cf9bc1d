"""The agent-facing surface: the REST API (`app`, django-ninja, with its routes in `routes`:
each parses, calls one ledger function and shapes the answer) and its schemas, the answers as
the API shows them (`serialize`), input checks, the API's middleware, the long poll, provider
webhooks, and what tells an agent of a status change (`notifications`, `callbacktargets`)."""
