"""The one base class for errors a user can fix (bad input, a missing file, a wrong option).

This module imports nothing, so the CLI can catch user errors without loading the library. The
library raises subclasses named after where they arise; the CLI turns any of them into a one-line
message and exit 2, the TUI into a notice. Anything else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """Something the user can fix; its message names the file, line, field or option at fault."""

    def lines(self) -> list[str]:
        """The message as the CLI prints it: one line, or one a problem for several at once."""
        return [str(self)]
