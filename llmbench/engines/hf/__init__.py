"""engines.hf layer."""
