"""`manage.py teams`: teams from the shell, as the admin pages set them (docs/operations/teams.md).

teams list
teams create payments [--slug payments] [--webhook URL] [--slack URL] [--email ADDRESS]
teams add payments olga           teams remove payments olga
teams agent payments alice        teams tool payments sandbox-pay    (team "-": no team)
teams grant-all audrey [--off]
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.text import slugify

from ledger.models import Agent, AllTeamsGrant, Team, TeamMembership, Tool
from ledger.policy.teams import add_member, grant_all_teams, remove_member

NO_TEAM = "-"


class Command(BaseCommand):
    help = "Create teams, put people in them, give agents and tools a team, grant all teams."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("list", help="teams, their people, agents and tools")
        create = sub.add_parser("create", help="create a team (or change its channels)")
        create.add_argument("name")
        create.add_argument("--slug", default="")
        create.add_argument("--webhook", default=None, help="the team's JSON alert webhook URL")
        create.add_argument("--slack", default=None, help="the team's Slack webhook URL")
        create.add_argument("--email", default=None, help="the team's alert email address")
        for verb, what in (("add", "put a person in"), ("remove", "take a person out of")):
            member = sub.add_parser(verb, help=f"{what} a team (set by an admin)")
            member.add_argument("team")
            member.add_argument("username")
        for verb in ("agent", "tool"):
            owned = sub.add_parser(verb, help=f"give an {verb} a team ('-' for none)")
            owned.add_argument("team")
            owned.add_argument("name")
        grant = sub.add_parser("grant-all", help="let a person see every team")
        grant.add_argument("username")
        grant.add_argument("--off", action="store_true", help="take the grant back")

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        if action == "list":
            self._list()
        elif action == "create":
            self._create(options)
        elif action in ("add", "remove"):
            team, user = _team(options["team"]), _user(options["username"])
            (add_member if action == "add" else remove_member)(user, team)
            self.stdout.write(f"{user.username} {'in' if action == 'add' else 'out of'} {team}.")
        elif action in ("agent", "tool"):
            self._own(action, options["team"], options["name"])
        else:
            user = _user(options["username"])
            grant_all_teams(user, on=not options["off"])
            self.stdout.write(
                f"{user.username} {'no longer sees' if options['off'] else 'sees'} all teams."
            )

    def _create(self, options: dict[str, Any]) -> None:
        name = options["name"].strip()
        team = Team.objects.filter(name=name).first() or Team(name=name)
        team.slug = options["slug"] or team.slug or slugify(name)
        for option, field in (
            ("webhook", "alert_webhook_url"),
            ("slack", "alert_slack_url"),
            ("email", "alert_email"),
        ):
            if options[option] is not None:
                setattr(team, field, options[option])
        try:
            team.full_clean()
        except ValidationError as exc:
            problems = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
            raise CommandError(problems) from None
        team.save()
        self.stdout.write(f"Team {team.name!r} ({team.slug}).")

    def _own(self, kind: str, team_name: str, name: str) -> None:
        model = Agent if kind == "agent" else Tool
        row = model.objects.filter(name=name).first()
        if row is None:
            raise CommandError(f"No {kind} is named {name!r}.")
        row.team = None if team_name == NO_TEAM else _team(team_name)
        row.save(update_fields=["team"])
        self.stdout.write(f"{kind.capitalize()} {name!r}: team {row.team or 'none'}.")

    def _list(self) -> None:
        for team in Team.objects.all():
            people = sorted(
                f"{m.user.username} ({m.source})"
                for m in TeamMembership.objects.filter(team=team).select_related("user")
            )
            agents = sorted(team.agents.values_list("name", flat=True))
            tools = sorted(team.tools.values_list("name", flat=True))
            self.stdout.write(f"{team.name} ({team.slug})")
            self.stdout.write(f"  people: {', '.join(people) or '-'}")
            self.stdout.write(f"  agents: {', '.join(agents) or '-'}")
            self.stdout.write(f"  tools: {', '.join(tools) or '-'}")
        granted = sorted(AllTeamsGrant.objects.values_list("user__username", flat=True))
        self.stdout.write(f"all teams: {', '.join(granted) or '-'}")


def _team(name: str) -> Team:
    team = Team.objects.filter(name=name).first() or Team.objects.filter(slug=name).first()
    if team is None:
        raise CommandError(f"No team is named {name!r}.")
    return team


def _user(username: str) -> User:
    user = User.objects.filter(username=username).first()
    if user is None:
        raise CommandError(f"No user is named {username!r}.")
    return user
