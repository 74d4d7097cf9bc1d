"""The API says what it enforces: Schemathesis, as its command line runs it (every check; the
examples, coverage, fuzzing and stateful phases), against the OpenAPI document the live
server serves, finds nothing.

Every check includes `positive_data_acceptance` (a request the document allows is not refused
with a 4xx other than 401, 403, 404, 409 or 429), `negative_data_rejection` (a request it
forbids is refused), `unsupported_method` and `allow_header_conformance` (a 405 names the
methods the path accepts), and conformance of every response. The stateful phase follows the
document's links: an intent, then its claim, heartbeat, outcome, cancel, compensation.
"""

from __future__ import annotations

import json
import re

import schemathesis
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import Status, events, from_schema

# Every check the command line's `--checks all` runs.
CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
    "positive_data_acceptance",
    "missing_required_header",
    "unsupported_method",
    "allow_header_conformance",
    "use_after_free",
    "ensure_resource_availability",
    "ignored_auth",
]


# What the document cannot state, since it depends on what is recorded or on a tool's
# declaration (docs/api.md, "What the schema cannot say"): a 422 naming only these is not a
# schema-valid request refused for an unstated reason.
UNSTATABLE = {
    "depends_on": r"unknown effect ids: ",
    "tool": r"has no compensated_by|the compensated_by of",
    "lease_seconds": r"^at least [0-9]+$",
    "effect_key": r"must not contain ':(comp|decision):'|not allowed for a tool with key_fields",
    "step_id": r"must not contain ':(comp|decision):'|run_id and step_id together at most",
    "compensation_key": r"must not start with 'decision-'",
}
CARD = r"must not contain a card number"


def _unstatable(check: str, status: int, content: bytes) -> bool:
    if check != "positive_data_acceptance" or status != 422:
        return False
    fields = json.loads(content).get("fields") or {}
    return bool(fields) and all(
        re.search(UNSTATABLE.get(name, CARD), problem) or re.search(CARD, problem)
        for name, problem in fields.items()
    )


def _config(key: str, phases: set[str]) -> SchemathesisConfig:
    return SchemathesisConfig.from_dict(
        {
            # Fixed, so that a failure is the same on the next run. Fuzzing goes on until the
            # time is up, so each run holds the phases it is given alone (`RUNS`): on a busy
            # machine, fuzzing no longer leaves the stateful phase no time.
            "seed": 20260601,
            "max-time": 30,
            "workers": 1,
            "headers": {"Authorization": f"Bearer {key}"},
            # A long poll on an effect waits its whole `wait` for a change nothing in the run
            # makes: one second, not up to sixty (tests/test_longpoll_listen.py tests it).
            "parameters": {"query.wait": 1},
            "generation": {"max-examples": 12},
            "checks": {name: {"enabled": True} for name in CHECKS},
            "phases": {
                "examples": {"enabled": "examples" in phases},
                "coverage": {"enabled": "coverage" in phases},
                "fuzzing": {"enabled": "fuzzing" in phases},
                "stateful": {"enabled": "stateful" in phases, "max-steps": 12},
            },
        }
    )


def _outcomes(stream) -> tuple[list[str], list[str], set[str]]:
    """Failures and errors, as text, and the phases that ran."""
    failures, errors, phases = [], [], set()
    for event in stream:
        if isinstance(event, events.PhaseFinished) and event.status != Status.SKIP:
            phases.add(event.phase.name.value)
        elif isinstance(event, events.NonFatalError):
            errors.append(f"{event.label}: {event.info.title}: {event.info.message}")
        elif isinstance(event, events.FatalError):
            errors.append(f"fatal: {event.exception!r}")
        elif isinstance(event, events.ScenarioFinished | events.FuzzScenarioFinished):
            failures.extend(_failures(event.recorder))
    return failures, errors, phases


def _failures(recorder) -> list[str]:
    found = []
    for case_id, checks in recorder.checks.items():
        interaction = recorder.interactions.get(case_id)
        response = interaction.response if interaction else None
        answer = f"{response.status_code} {response.content[:300]!r}" if response else "-"
        found.extend(
            f"{recorder.label}: {check.name}: {check.failure_info.failure.title}\n"
            f"{check.failure_info.code_sample}\n-> {answer}"
            for check in checks
            if check.status == Status.FAILURE
            and check.failure_info is not None
            and not (response and _unstatable(check.name, response.status_code, response.content))
        )
    return found


# Each run has its own time: fuzzing fills whatever time it is given.
RUNS = [{"examples", "coverage", "fuzzing"}, {"stateful"}]


def test_schemathesis_finds_nothing_the_schema_does_not_say(live_server, alice):
    failures, errors, phases = [], [], set()
    for run in RUNS:
        schema = schemathesis.openapi.from_url(
            f"{live_server.url}/api/v1/openapi.json", config=_config(alice.key, run)
        )
        # The operator API answers an agent key 401 and nothing else (tests/test_operator_api.py).
        found = _outcomes(from_schema(schema.exclude(tag="operator")).execute())
        failures += found[0]
        errors += found[1]
        phases |= found[2]
    assert not failures, "\n\n".join(dict.fromkeys(failures))
    assert not errors, "\n".join(errors)
    assert {"coverage", "fuzzing", "stateful"} <= phases
