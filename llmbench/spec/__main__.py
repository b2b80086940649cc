"""``python -m llmbench.spec > docs/config.md``: the settings reference, from the spec."""

from llmbench.spec.reference import reference

print(reference(), end="")
