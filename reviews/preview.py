"""What happens after a decision, before it is taken; and what recovery will do for a run."""

from __future__ import annotations

from typing import Any


def preview_for(effect: Any, action: str) -> Any:
    """What `action` on `effect` will lead to (rendered by `reviews/_preview.html`)."""
    return None
