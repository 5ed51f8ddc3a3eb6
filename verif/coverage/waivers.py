"""Lines of emitted Verilog no test reaches, each with why (``make coverage``,
:mod:`verif.coverage`): per block, a regular expression searched in ``"<where> | <text>"``
(where: the process's signal and the arms above the line, :mod:`verif.coverage.context`)
and the reason. A waiver names a cause, so one entry may explain every copy of an arm that
Amaranth's one-process-per-signal emission makes."""
from __future__ import annotations

import re

__all__ = ["WAIVERS", "waived"]

WAIVERS: dict[str, list[tuple[str, str]]] = {
}


def waived(block: str, where: str) -> str | None:
    """The reason a line at ``where`` is never reached, or None if nothing explains it."""
    for pattern, reason in WAIVERS.get(block, ()):
        if re.search(pattern, where):
            return reason
    return None
