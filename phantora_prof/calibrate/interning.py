"""Shared string tables of the shipped kernel data (kernel names and launch APIs appear once,
records refer to them by index): used by calibrate/kernel_table.py and calibrate/families.py."""
from __future__ import annotations


class Interner:
    """Strings in order of first use; calling it with a string gives that string's index."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self._index: dict[str, int] = {}

    def __call__(self, s: str) -> int:
        i = self._index.get(s)
        if i is None:
            i = self._index[s] = len(self.values)
            self.values.append(s)
        return i
