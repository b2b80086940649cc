"""The one exception type that means "the user asked for something we can't do"."""


class UserError(Exception):
    """A bad input or an impossible request.

    The CLI prints its message as one line on stderr and exits 2; it never shows a traceback.
    The message must name the file, line, field or option at fault and, where there is one, the way out.
    """
