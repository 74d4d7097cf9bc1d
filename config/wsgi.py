"""The WSGI application, as gunicorn loads it in each worker."""

import gc
import os
from collections.abc import Callable, Iterable
from typing import Any

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def client_address(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """REMOTE_ADDR from X-Forwarded-For, for requests that came through a Unix socket only:
    gunicorn serves those with an empty REMOTE_ADDR, and only a process on this machine can
    reach the socket. There nginx (`config.nginx`) has replaced whatever the client sent with
    the one address it takes for the client's (the TCP peer, or behind LEDGER_TRUSTED_PROXIES
    the right-most untrusted hop); the last entry of the header is taken. Over TCP the header
    is ignored, so a client talking to gunicorn directly cannot choose the address that login
    lockouts count."""

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        forwarded = environ.get("HTTP_X_FORWARDED_FOR")
        if forwarded and not environ.get("REMOTE_ADDR"):
            environ["REMOTE_ADDR"] = forwarded.rsplit(",", 1)[-1].strip()
        return app(environ, start_response)

    return wrapped


application = client_address(get_wsgi_application())

# Everything loaded so far (modules, models, settings, URL patterns) lives as long as the
# process. Frozen out of the collector's generations, it is no longer traversed by every full
# collection, which a page that builds many objects (50 rows of the review queue) otherwise
# triggers every few requests, at tens of milliseconds each.
gc.freeze()
