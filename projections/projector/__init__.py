"""x"""
__all__: list[str] = []
