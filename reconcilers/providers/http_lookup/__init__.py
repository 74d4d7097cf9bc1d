"""A generic lookup for any provider with a search by reference: configured, not written."""

from reconcilers.providers.http_lookup.adapter import HttpLookup

ADAPTER = HttpLookup
