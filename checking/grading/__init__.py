"""The floor that writes grades (docs/checking.md, "How it works")."""
__all__ = []
