"""A provider with nothing but a search by reference, behind credentials and pages: what the
generic `http_lookup` adapter is configured against."""
