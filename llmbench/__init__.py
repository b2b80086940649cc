"""llmbench: measure how long a language model makes a person wait (TTFT and TPOT)."""

__version__ = "0.1.0"
