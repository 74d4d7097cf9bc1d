"""Saved queue filters and bulk jobs."""

__all__: list[str] = []
