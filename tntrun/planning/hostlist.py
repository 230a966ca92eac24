"""Host names in few characters: Slurm-style hostlists (``node[0001-1024]``), else the
first and last name and a count.

A dry run at a thousand hosts must fit on a screen; the full list goes to a file. Names
keep their order (the rank map follows it), so a range is only made of names that follow
each other, as Slurm writes an unsorted list (``node[3,1]``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

NUMBERED = re.compile(r"^(.*?)(\d+)(\D*)$")  # prefix, the last number, what follows it
SHORT_CHARS = 120  # a compressed list longer than this reads no better than first..last


@dataclass
class _Group:
    """Names sharing a prefix, a suffix and a number width: ``prefix[ranges]suffix``."""

    prefix: str
    suffix: str
    width: int  # zero-padded digits (node0007: 4), 0 when unpadded
    ranges: list[list[int]] = field(default_factory=list)  # [first, last], in order

    def takes(self, prefix: str, digits: str, suffix: str) -> bool:
        same = (prefix, suffix) == (self.prefix, self.suffix)
        return same and str(int(digits)).zfill(self.width) == digits

    def add(self, number: int) -> None:
        if self.ranges and self.ranges[-1][1] + 1 == number:
            self.ranges[-1][1] = number
        else:
            self.ranges.append([number, number])

    def text(self) -> str:
        def number(n: int) -> str:
            return str(n).zfill(self.width)

        parts = [number(a) if a == b else f"{number(a)}-{number(b)}" for a, b in self.ranges]
        if len(parts) == 1 and "-" not in parts[0]:
            return f"{self.prefix}{parts[0]}{self.suffix}"
        return f"{self.prefix}[{','.join(parts)}]{self.suffix}"


def compress_hosts(names: Sequence[str]) -> str:
    """Slurm's hostlist form of ``names``, in their order: ``node[0001-0512,0600]``."""
    pieces: list[_Group | str] = []
    for name in names:
        match = NUMBERED.match(name)
        if match is None:
            pieces.append(name)
            continue
        prefix, digits, suffix = match.groups()
        last = pieces[-1] if pieces else None
        if not (isinstance(last, _Group) and last.takes(prefix, digits, suffix)):
            padded = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
            last = _Group(prefix, suffix, padded)
            pieces.append(last)
        last.add(int(digits))
    return ",".join(p if isinstance(p, str) else p.text() for p in pieces)


def hosts_summary(names: Sequence[str]) -> str:
    """``names`` for a person: the hostlist when it is short, else the first and last name;
    with the count when there is more than one."""
    if len(names) == 1:
        return names[0]
    compressed = compress_hosts(names)
    shown = compressed if len(compressed) <= SHORT_CHARS else f"{names[0]}..{names[-1]}"
    return f"{shown} ({len(names)} hosts)"
