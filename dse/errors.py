"""User-facing errors: one clear line naming the problem and the fix."""

from __future__ import annotations


class DseError(Exception):
    """A problem with the user's input or environment, not a bug in dse.

    The message is a single line that says what is wrong and how to fix it. Entry points
    print it without a traceback and exit with status 2.
    """

    def __str__(self) -> str:
        # names from the user's files (layers, tensors, keys) may hold line breaks: keep one line
        text = super().__str__()
        return text.replace("\r", " ").replace("\n", " ") if "\n" in text or "\r" in text else text
