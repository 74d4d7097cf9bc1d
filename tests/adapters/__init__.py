"""Framework adapters of the client, against real frameworks, the real ledger and sandboxes."""
