"""The package version, in a module of its own so any module can read it without importing the package."""

__version__ = "0.3.0"
