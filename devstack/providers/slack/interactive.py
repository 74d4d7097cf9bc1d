"""The fake Slack's interactive side: messages with buttons posted to an incoming webhook, a
person pressing one, the modal the app opens, its submission, and the app's answers.

- `POST /services/<path>`: an incoming webhook. Takes `{"text", "blocks"}` (blocks checked
  as Slack checks them, `devstack.providers.slack.blockkit`), answers `ok` as text.
- `POST /_sandbox/press {"action_id", "user", "team", "message": n}`: a person presses the
  button `action_id` of the n-th message (the last by default). The fake sends the app's
  interactivity Request URL a `block_actions` payload in Slack's documented shape, as a form
  (`payload=<JSON>`), signed as Slack signs (`X-Slack-Request-Timestamp`,
  `X-Slack-Signature: v0=HMAC-SHA256(secret, "v0:<timestamp>:<body>")`), with a
  `trigger_id` (usable once, for 3 seconds as at Slack, `views.open`) and a `response_url`
  of its own (usable 5 times within 30 minutes). `timestamp` and `secret` sign it otherwise.
  It answers what the app answered.
- `POST /api/views.open`, `POST /api/users.info`: the Web API methods, with the bot token.
- `POST /_sandbox/submit {"values": {block_id: text or true}, "view": id}`: the person
  submits the modal (the last opened by default): a signed `view_submission` whose
  `state.values` holds the view's initial values overridden by `values`.
- `POST /actions/<id>`: a `response_url`. `replace_original` replaces the message's text and
  blocks; `response_type: ephemeral` is kept as a message only its person sees.
- `POST /_sandbox/replay {"request": n}`: the n-th signed request sent again, byte for byte.
- `POST /_sandbox/users {"id", "team", "email", …}`: a member `users.info` answers for.
- `GET /_sandbox/interactive`: everything above, for a test to read.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlencode

from devstack.providers.slack.blockkit import Invalid, check_blocks, check_view
from devstack.providers.slack.events import signature
from devstack.sandbox.service import HttpError, Reply, Request

TRIGGER_SECONDS = 3.0  # a trigger_id opens a modal within three seconds of the press
RESPONSE_URL_USES, RESPONSE_URL_SECONDS = 5, 1800
TIMEOUT = 10  # the fake waits longer than Slack's three seconds: tests run on busy machines


class Interactive:
    """The interactive side's state, in memory (a fake's messages live as long as it runs)."""

    def __init__(self, url: str, secret: str, token: str, team: str, app: str) -> None:
        self.url, self.secret, self.token, self.team, self.app = url, secret, token, team, app
        self.lock = threading.Lock()
        self.messages: list[dict[str, Any]] = []
        self.responses: list[dict[str, Any]] = []
        self.views: list[dict[str, Any]] = []
        self.sent: list[dict[str, Any]] = []
        self.users: dict[str, dict[str, Any]] = {}
        self._triggers: dict[str, dict[str, Any]] = {}
        self._urls: dict[str, dict[str, Any]] = {}
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def reset(self) -> None:
        with self.lock:
            for kept in (self.messages, self.responses, self.views, self.sent):
                kept.clear()
            self.users.clear()
            self._triggers.clear()
            self._urls.clear()

    def state(self) -> dict[str, Any]:
        with self.lock:
            return json.loads(
                json.dumps(
                    {
                        "messages": self.messages,
                        "responses": self.responses,
                        "views": self.views,
                        "sent": self.sent,
                    }
                )
            )

    # --- what the app calls -----------------------------------------------------------------

    def incoming(self, request: Request) -> Reply:
        """An incoming webhook's post: the message, kept with its blocks."""
        message = request.json()
        text, blocks = message.get("text"), message.get("blocks")
        if not isinstance(text, str) or not text:
            return Reply(400, raw=b"no_text", content_type="text/plain")
        if blocks is not None:
            try:
                check_blocks(blocks)
            except Invalid as exc:
                return Reply(400, raw=f"invalid_blocks: {exc}".encode(), content_type="text/plain")
        with self.lock:
            ts = f"{time.time():.6f}"
            self.messages.append(
                {
                    "ts": ts,
                    "webhook": request.path,
                    "text": text,
                    "blocks": blocks or [],
                    "replaced": 0,
                }
            )
        return Reply(200, raw=b"ok", content_type="text/plain")

    def respond(self, request: Request) -> Reply:
        """A post to a response_url the fake gave with a press."""
        body = request.json()
        with self.lock:
            known = self._urls.get(request.path)
            if known is None or known["uses"] >= RESPONSE_URL_USES:
                return Reply(404, raw=b"no_active_hooks", content_type="text/plain")
            if time.time() - known["made"] > RESPONSE_URL_SECONDS:
                return Reply(404, raw=b"expired_url", content_type="text/plain")
            known["uses"] += 1
            if body.get("replace_original") and body.get("response_type") != "ephemeral":
                if body.get("blocks") is not None:
                    try:
                        check_blocks(body["blocks"])
                    except Invalid as exc:
                        return Reply(400, raw=f"invalid_blocks: {exc}".encode())
                message = self.messages[known["message"]]
                message.update(text=body.get("text", ""), blocks=body.get("blocks") or [])
                message["replaced"] += 1
            self.responses.append({"url": request.path, "user": known["user"], "body": body})
        return Reply(200, {"ok": True})

    def method(self, name: str, args: dict[str, Any]) -> Reply:
        """`views.open` and `users.info`, once the bot token was checked."""
        if name == "users.info":
            with self.lock:
                user = self.users.get(str(args.get("user") or ""))
            if user is None:
                return Reply(200, {"ok": False, "error": "user_not_found"})
            return Reply(200, {"ok": True, "user": user})
        view = args.get("view")
        if isinstance(view, str):
            view = json.loads(view)
        try:
            check_view(view)
        except Invalid as exc:
            answer = {
                "ok": False,
                "error": "invalid_arguments",
                "response_metadata": {"messages": [str(exc)]},
            }
            return Reply(200, answer)
        with self.lock:
            trigger = self._triggers.pop(str(args.get("trigger_id") or ""), None)
            if trigger is None:
                return Reply(200, {"ok": False, "error": "invalid_trigger_id"})
            if time.time() - trigger["made"] > TRIGGER_SECONDS:
                return Reply(200, {"ok": False, "error": "expired_trigger_id"})
            opened = {
                **view,
                "id": f"V{secrets.token_hex(5).upper()}",
                "team_id": self.team,
                "app_id": self.app,
                "hash": secrets.token_hex(8),
                "state": {"values": {}},
            }
            self.views.append({"view": opened, "user": trigger["user"], "closed": False})
        return Reply(200, {"ok": True, "view": opened})

    def add_user(self, body: dict[str, Any]) -> Reply:
        user_id, team = str(body.get("id") or ""), str(body.get("team") or self.team)
        if not user_id:
            raise HttpError(400, "invalid_request", "a user needs an id")
        user = {
            "id": user_id,
            "team_id": team,
            "name": body.get("name", user_id.lower()),
            "deleted": bool(body.get("deleted")),
            "is_bot": bool(body.get("is_bot")),
            "is_email_confirmed": body.get("confirmed", True),
            "profile": {"email": body.get("email", ""), "real_name": body.get("name", "")},
        }
        with self.lock:
            self.users[user_id] = user
        return Reply(200, user)

    # --- what a person does -----------------------------------------------------------------

    def press(self, request: Request) -> Reply:
        body = request.json()
        person = _person(body, self.team)
        with self.lock:
            index = int(body.get("message", -1))
            try:
                message = self.messages[index]
            except IndexError:
                raise HttpError(404, "not_found", "no such message") from None
            index = self.messages.index(message)
            action = _find_action(message["blocks"], str(body.get("action_id") or ""))
            trigger = f"{int(time.time())}.{secrets.randbelow(10**9)}.{secrets.token_hex(8)}"
            self._triggers[trigger] = {"user": person["id"], "made": time.time()}
            path = (
                f"/actions/{person['team_id']}/{secrets.randbelow(10**12)}/{secrets.token_hex(12)}"
            )
            self._urls[path] = {
                "message": index,
                "user": person["id"],
                "uses": 0,
                "made": time.time(),
            }
            payload = self._block_actions(person, message, action, trigger)
        payload["response_url"] = f"http://{request.header('Host')}{path}"
        answer = self.send(payload, body)
        return Reply(
            200, {**answer, "trigger_id": trigger, "response_url": payload["response_url"]}
        )

    def submit(self, request: Request) -> Reply:
        body = request.json()
        person = _person(body, self.team)
        with self.lock:
            chosen = (
                [v for v in self.views if v["view"]["id"] == body["view"]]
                if "view" in body
                else self.views[-1:]
            )
            if not chosen or chosen[0]["closed"]:
                raise HttpError(404, "not_found", "no such open view")
            shown = chosen[0]
            view = {
                **shown["view"],
                "state": {"values": _state(shown["view"], body.get("values") or {})},
            }
        payload = {
            "type": "view_submission",
            "team": {"id": person["team_id"], "domain": "fake"},
            "user": person,
            "api_app_id": self.app,
            "token": "fake-verification-token",
            "trigger_id": f"{int(time.time())}.{secrets.token_hex(8)}",
            "view": view,
            "response_urls": [],
            "is_enterprise_install": False,
            "enterprise": None,
        }
        answer = self.send(payload, body)
        closes = answer["status"] == 200 and (
            not answer["json"] or answer["json"].get("response_action") == "clear"
        )
        with self.lock:
            shown["closed"] = closes
        return Reply(200, answer)

    def replay(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            sent = self.sent[int(body.get("request", -1))]
        status, answer = self._post(sent["body"].encode(), sent["headers"])
        return Reply(200, {"status": status, "body": answer})

    # --- sending, signed as Slack signs -----------------------------------------------------

    def send(self, payload: dict[str, Any], asked: dict[str, Any]) -> dict[str, Any]:
        """The interaction posted to the Request URL; what came back."""
        raw = urlencode({"payload": json.dumps(payload)}).encode()
        stamp = int(asked.get("timestamp") or time.time())
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "User-Agent": "Slackbot 1.0 (fake)",
            "X-Slack-Request-Timestamp": str(stamp),
            "X-Slack-Signature": signature(str(asked.get("secret") or self.secret), stamp, raw),
        }
        status, answer = self._post(raw, headers)
        with self.lock:
            self.sent.append(
                {
                    "type": payload["type"],
                    "headers": headers,
                    "body": raw.decode(),
                    "status": status,
                    "answer": answer,
                }
            )
        try:
            parsed = json.loads(answer) if answer else None
        except ValueError:
            parsed = None
        return {"status": status, "body": answer, "json": parsed, "request": len(self.sent) - 1}

    def _post(self, raw: bytes, headers: dict[str, str]) -> tuple[int | None, str]:
        request = urllib.request.Request(self.url, data=raw, method="POST", headers=headers)
        try:
            with self._opener.open(request, timeout=TIMEOUT) as response:
                return response.status, response.read().decode(errors="replace")
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(errors="replace")
        except (urllib.error.URLError, OSError) as error:
            return None, str(error)

    def _block_actions(
        self, person: dict[str, Any], message: dict[str, Any], action: dict[str, Any], trigger: str
    ) -> dict[str, Any]:
        pressed = {
            "action_id": action["action_id"],
            "block_id": action["block_id"],
            "text": action["text"],
            "type": "button",
            "action_ts": f"{time.time():.6f}",
        }
        for name in ("value", "style", "url"):
            if name in action:
                pressed[name] = action[name]
        shown = {
            "type": "message",
            "subtype": "bot_message",
            "text": message["text"],
            "ts": message["ts"],
            "bot_id": "B0FAKEBOT1",
            "blocks": message["blocks"],
        }
        return {
            "type": "block_actions",
            "user": person,
            "api_app_id": self.app,
            "token": "fake-verification-token",
            "container": {
                "type": "message",
                "message_ts": message["ts"],
                "channel_id": "C0ALERTS01",
                "is_ephemeral": False,
            },
            "trigger_id": trigger,
            "team": {"id": person["team_id"], "domain": "fake"},
            "enterprise": None,
            "is_enterprise_install": False,
            "channel": {"id": "C0ALERTS01", "name": "alerts"},
            "message": shown,
            "state": {"values": {}},
            "actions": [pressed],
        }


def _person(body: dict[str, Any], team: str) -> dict[str, Any]:
    user = str(body.get("user") or "U0PERSON01")
    name = str(body.get("name") or user.lower())
    return {"id": user, "username": name, "name": name, "team_id": str(body.get("team") or team)}


def _find_action(blocks: list[dict[str, Any]], action_id: str) -> dict[str, Any]:
    """The button `action_id` in a message's blocks, with the block it is in."""
    for block in blocks:
        elements = [block["accessory"]] if "accessory" in block else block.get("elements", [])
        for element in elements:
            if element.get("action_id") == action_id:
                return {**element, "block_id": block.get("block_id") or "fake"}
    raise HttpError(404, "not_found", f"the message has no button {action_id!r}")


def _state(view: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A modal's `state.values` as Slack sends them: every input, as it was left."""
    state: dict[str, Any] = {}
    for block in view.get("blocks", []):
        if block.get("type") != "input":
            continue
        element, block_id = block["element"], block["block_id"]
        given = values.get(block_id)
        if element["type"] == "checkboxes":
            ticked = bool(given) if block_id in values else bool(element.get("initial_options"))
            selected = element["options"][:1] if ticked else []
            entry = {"type": "checkboxes", "selected_options": selected}
        else:
            typed = given if block_id in values else element.get("initial_value")
            entry = {"type": "plain_text_input", "value": typed if typed else None}
        state[block_id] = {element["action_id"]: entry}
    return state
