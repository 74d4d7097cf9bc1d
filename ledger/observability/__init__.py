"""What the ledger tells the people who run it: metrics and the summary behind its gauges,
JSON logs with each request's context, and readiness for `/health`."""
