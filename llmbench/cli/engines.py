"""``llmbench engines``: the engines --engine can use on this machine."""

from __future__ import annotations


def engines() -> None:
    """The engines --engine can use here: installed versions, what each reads, its converter, and whether
    llama.cpp's build runs on this CPU."""
    from llmbench import engines as eng
    from llmbench.present import terminal as display

    for line in display.engines_lines(eng.status()):
        display.out.print(line, markup=False, soft_wrap=True)
