"""Notes on review items."""

__all__: list[str] = []
