"""The floor that runs a student's code, and judges nothing (docs/checking.md, "How it works")."""
__all__ = []
