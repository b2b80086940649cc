"""``python -m llmbench.spec > docs/config.md``: the settings reference, from the spec."""

from llmbench.spec import reference

print(reference(), end="")
