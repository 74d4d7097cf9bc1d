"""The fake Slack's check of Block Kit, as Slack refuses what breaks its documented limits: a
message's blocks (incoming webhooks answer `invalid_blocks`) and a modal's view (`views.open`
answers `invalid_arguments`). Only what the ledger sends is checked, to Slack's limits: block
and element types, text lengths, ids unique within a message or a view.
"""

from __future__ import annotations

from typing import Any

BLOCKS = {"section", "context", "actions", "input", "divider", "header"}
INPUTS = {"plain_text_input", "checkboxes"}


class Invalid(Exception):
    """What Slack would refuse, and why (its `response_metadata.messages`)."""


def _text(obj: Any, limit: int, where: str, *, plain_only: bool = False) -> str:
    if not isinstance(obj, dict) or obj.get("type") not in ("plain_text", "mrkdwn"):
        raise Invalid(f"{where}: a text object is required")
    if plain_only and obj["type"] != "plain_text":
        raise Invalid(f"{where}: must be plain_text")
    text = obj.get("text")
    if not isinstance(text, str) or not 1 <= len(text) <= limit:
        raise Invalid(f"{where}: text must have 1 to {limit} characters")
    return text


def _button(element: dict[str, Any], where: str) -> None:
    _text(element.get("text"), 75, f"{where}.text", plain_only=True)
    if len(str(element.get("value", ""))) > 2000 or len(str(element.get("url", ""))) > 3000:
        raise Invalid(f"{where}: value longer than 2000 or url longer than 3000 characters")
    if element.get("style") not in (None, "primary", "danger"):
        raise Invalid(f"{where}: style must be primary or danger")
    confirm = element.get("confirm")
    if confirm is not None:
        _text(confirm.get("title"), 100, f"{where}.confirm.title", plain_only=True)
        _text(confirm.get("text"), 300, f"{where}.confirm.text")
        _text(confirm.get("confirm"), 30, f"{where}.confirm.confirm", plain_only=True)
        _text(confirm.get("deny"), 30, f"{where}.confirm.deny", plain_only=True)


def _element(element: Any, where: str, action_ids: set[str]) -> None:
    if not isinstance(element, dict):
        raise Invalid(f"{where}: an element object is required")
    action_id = element.get("action_id")
    if action_id is not None:
        if not isinstance(action_id, str) or not 1 <= len(action_id) <= 255:
            raise Invalid(f"{where}.action_id: 1 to 255 characters")
        if action_id in action_ids:
            raise Invalid(f"{where}.action_id: {action_id} is not unique")
        action_ids.add(action_id)
    kind = element.get("type")
    if kind == "button":
        _button(element, where)
    elif kind == "plain_text_input":
        if len(str(element.get("initial_value", ""))) > 3000:
            raise Invalid(f"{where}.initial_value: at most 3000 characters")
    elif kind == "checkboxes":
        options = element.get("options")
        if not isinstance(options, list) or not 1 <= len(options) <= 10:
            raise Invalid(f"{where}.options: 1 to 10 options")
        for n, option in enumerate(options):
            _text(option.get("text"), 75, f"{where}.options[{n}].text")
    elif kind not in ("plain_text", "mrkdwn", "image"):
        raise Invalid(f"{where}: unknown element type {kind!r}")


def _block(block: Any, where: str, action_ids: set[str], block_ids: set[str]) -> None:
    if not isinstance(block, dict) or block.get("type") not in BLOCKS:
        raise Invalid(f"{where}: unknown block type")
    block_id = block.get("block_id")
    if block_id is not None:
        if not isinstance(block_id, str) or not 1 <= len(block_id) <= 255 or block_id in block_ids:
            raise Invalid(f"{where}.block_id: 1 to 255 characters, unique")
        block_ids.add(block_id)
    kind = block["type"]
    if kind == "section":
        _text(block.get("text"), 3000, f"{where}.text")
        if "accessory" in block:
            _element(block["accessory"], f"{where}.accessory", action_ids)
    elif kind in ("context", "actions"):
        elements = block.get("elements")
        if not isinstance(elements, list) or not 1 <= len(elements) <= (
            10 if kind == "context" else 25
        ):
            raise Invalid(f"{where}.elements: 1 to 10 (context) or 25 (actions) elements")
        for n, element in enumerate(elements):
            _element(element, f"{where}.elements[{n}]", action_ids)
    elif kind == "input":
        _text(block.get("label"), 2000, f"{where}.label", plain_only=True)
        element = block.get("element")
        if not isinstance(element, dict) or element.get("type") not in INPUTS:
            raise Invalid(f"{where}.element: an input element is required")
        _element(element, f"{where}.element", set())


def check_blocks(blocks: Any, limit: int = 50) -> None:
    if not isinstance(blocks, list) or not 1 <= len(blocks) <= limit:
        raise Invalid(f"blocks: 1 to {limit} blocks")
    action_ids: set[str] = set()
    block_ids: set[str] = set()
    for n, block in enumerate(blocks):
        _block(block, f"blocks[{n}]", action_ids, block_ids)


def check_view(view: Any) -> None:
    if not isinstance(view, dict) or view.get("type") != "modal":
        raise Invalid("view: a modal is required")
    _text(view.get("title"), 24, "view.title", plain_only=True)
    for name in ("submit", "close"):
        if name in view:
            _text(view[name], 24, f"view.{name}", plain_only=True)
    if len(str(view.get("private_metadata", ""))) > 3000:
        raise Invalid("view.private_metadata: at most 3000 characters")
    if len(str(view.get("callback_id", ""))) > 255:
        raise Invalid("view.callback_id: at most 255 characters")
    check_blocks(view.get("blocks"), limit=100)
