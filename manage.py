#!/usr/bin/env python
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        # The settings read the environment: a value that makes no sense stops every command
        # here, with what is wrong, instead of a traceback.
        settings.INSTALLED_APPS  # noqa: B018
    except ImproperlyConfigured as exc:
        sys.exit(f"Configuration error: {exc}")
    execute_from_command_line(sys.argv)
