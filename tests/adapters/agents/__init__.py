"""Agent processes the adapter tests start, one script per framework and case."""
