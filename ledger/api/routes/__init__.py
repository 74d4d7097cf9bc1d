"""The agent API's routes, by what the agent does with them: an effect's life from intent to
outcome (`effects`), what comes after (`afterwards`: a run's journal, compensation, recovery),
and the doors without an agent key (`keyless`: a provider's signed webhook, the health check).
Each route parses its request, calls one ledger function and shapes the answer
(`ledger.api.serialize`); `tests/test_thin_doors.py` holds each to 15 lines."""
