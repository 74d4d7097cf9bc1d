"""`python -m devstack.idp --port 8123`: migrate the SQLite database, then serve on loopback
until stopped. The issuer is http://localhost:<port>/o unless IDP_ISSUER says otherwise."""

from __future__ import annotations

import argparse
import os


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    os.environ["DJANGO_SETTINGS_MODULE"] = "devstack.idp.settings"
    os.environ.setdefault("IDP_ISSUER", f"http://localhost:{args.port}/o")
    import django

    django.setup()
    from django.core.management import call_command
    from django.core.servers.basehttp import run
    from django.core.wsgi import get_wsgi_application

    call_command("migrate", verbosity=0, interactive=False)
    print(f"idp serving on {args.host}:{args.port}", flush=True)
    run(args.host, args.port, get_wsgi_application(), threading=True)


if __name__ == "__main__":
    main()
