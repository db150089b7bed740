"""The package version, in a module of its own so that any module can read it without
importing the top-level package (whose `__init__` knows every layer)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
