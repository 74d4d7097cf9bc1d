"""The WSGI application, as gunicorn loads it in each worker."""

import gc
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

# Everything loaded so far (modules, models, settings, URL patterns) lives as long as the
# process. Frozen out of the collector's generations, it is no longer traversed by every full
# collection, which a page that builds many objects (50 rows of the review queue) otherwise
# triggers every few requests, at tens of milliseconds each.
gc.freeze()
