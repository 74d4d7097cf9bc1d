"""What the provider's own record says: when a lookup's "not found" proves an effect never
arrived (`lookup_absence`), whether a record matches the request (`matching`), and what a
second copy at the provider means (`duplicates`). Statements have their own package,
`ledger.statements`."""
