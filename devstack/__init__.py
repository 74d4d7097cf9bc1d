"""The development stack and the harnesses: everything that runs the ledger on a developer's
machine or in CI, and nothing a server needs.

- `stack` (`make run`, `make test`), with `embedded` (PostgreSQL and Redis when none is
  configured), `supervisor`, `web` (gunicorn behind nginx as `make run` starts them),
  `provision` (databases, migrations, the demo agent) and `signals`;
- `sandbox`: the fake outside world, payment and messaging providers in processes of their own;
- `crashtest` (`make crashtest`) and `drills` (`make drills`), with what they share in
  `harness`.

It is not in the server's wheel (pyproject's `[tool.setuptools.packages.find]` includes
config, ledger, reconcilers and reviews only), and no module of those imports it
(`tests/test_devstack_apart.py`). In a checkout `config.settings` adds it to INSTALLED_APPS for
its management commands: `manage.py crashtest`, `manage.py faultdrill`, `manage.py sandbox`.
"""
