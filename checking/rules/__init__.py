"""The floor that judges the assignment's rules (docs/checking.md, "How it works")."""
__all__ = []
