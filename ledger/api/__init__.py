"""The agent-facing surface: the REST endpoints (`endpoints`, django-ninja) and their schemas,
the effect as the API shows it, input checks, the API's middleware, the long poll, provider
webhooks, and what tells an agent of a status change (`notifications`, `callbacktargets`)."""
