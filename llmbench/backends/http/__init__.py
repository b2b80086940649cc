"""backends.http layer."""
