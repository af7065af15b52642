"""schemas/binary: (created by relayout.py; describe this room)."""

__all__: list[str] = []
