"""Drivers: each command decides what to measure and in which order, and hands the plan to the one loop.

- :mod:`llmbench.drivers.run`: one backend, the prompt list ``repeats`` times round.
- :mod:`llmbench.drivers.sweep`: one in-process backend per setup, in interleaved rounds.
"""
