"""Framework adapters: thin modules over the guard, one per framework, each an optional extra."""
