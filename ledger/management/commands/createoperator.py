from __future__ import annotations

import getpass
import sys
from typing import Any

from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from ledger.policy.roles import ROLES, grant


class Command(BaseCommand):
    help = (
        "Create a person who signs in to the pages. Reads the password from standard input "
        "when it is not a terminal, otherwise asks for it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--role", choices=ROLES, default="operator")
        parser.add_argument("--email", default="")

    def handle(self, *args: Any, username: str, role: str, email: str, **options: Any) -> None:
        if User.objects.filter(username=username).exists():
            raise CommandError(f"A user named {username!r} exists already.")
        if sys.stdin.isatty():
            password = getpass.getpass("Password: ")
            if password != getpass.getpass("Password (again): "):
                raise CommandError("The passwords differ.")
        else:
            password = sys.stdin.readline().rstrip("\r\n")
        user = User(username=username, email=email)
        try:
            validate_password(password, user)
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from None
        with transaction.atomic():
            user.set_password(password)
            user.save()
            grant(user, role)
        self.stdout.write(f"Created {role} {username!r}.")
