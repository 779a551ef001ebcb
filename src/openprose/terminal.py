"""Text fit for a terminal. Values, errors, statements and whole programs are text a program's
author or a model wrote (and a model may have read anything): written to a terminal as they
are, an escape sequence in them could set the window title, write the clipboard (OSC 52), or
hide, clear and redraw what is shown, and a bidi override could reorder it. Everything of a
run that the CLI shows goes through :func:`printable` (or :func:`blanked` where columns must
stay aligned)."""

from __future__ import annotations

import re

#: Characters never written to a terminal as they are: C0 and C1 controls but newline and
#: tab, DEL, and the bidirectional and zero-width format characters.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069"
                     "\ufeff]")


def printable(text: str) -> str:
    """``text`` with each :data:`CONTROL` character written out (``\\x1b``, ``\\u202e``)."""
    return CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 256
                       else f"\\u{ord(m[0]):04x}", text)


def blanked(text: str) -> str:
    """``text`` with each :data:`CONTROL` character replaced by one U+FFFD (columns kept)."""
    return CONTROL.sub("\ufffd", text)
