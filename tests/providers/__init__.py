"""Tests of the provider adapters, each through its provider's SDK against its fake."""
