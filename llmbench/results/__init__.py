"""results layer."""
