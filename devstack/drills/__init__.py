"""Fault drills: the ledger's real processes under load while PostgreSQL or Redis is restarted
or the web process is SIGKILLed, then counted — acknowledged against stored, answers against
the promises of the API (503 with Retry-After, no traceback, no request hanging), and the
workers shown to do their work afterwards without having been restarted.

`scenarios` holds the three drills, `load` the clients, `servers` the private PostgreSQL and
Redis a drill may stop, `services` the ledger's processes, `checks` what is verified after,
`report` the counts; `manage.py faultdrill` runs them.
"""
