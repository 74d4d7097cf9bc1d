"""Placeholder: replaced by the real views."""
