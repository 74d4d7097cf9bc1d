"""Fake providers that answer in real providers' documented shapes, one package per provider:
its HTTP process (`fake`) on the sandbox service's fault knobs, and what the crash test calls
through the provider's SDK (`caller`)."""
