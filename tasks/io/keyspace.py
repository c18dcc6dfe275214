"""The keys under a prefix as numbers (``KeySpace``): where to cut a key range so that a
parallel listing (tasks/io/ranges.py) splits its work about in half."""

from __future__ import annotations

import bisect

from s3arch.io.keys import key_order, valid_names_near


AHEAD = 7  # the range open to the prefix's end is cut this many times as far on as it came (KeySpace.ahead)


class KeySpace:
    """The keys under a prefix as numbers, to cut a key range about in half.

    The digits are the characters a sample of the keys uses (a first page), so that halving
    lands among real keys after a few cuts instead of in the empty expanse of Unicode. A key
    with other characters maps onto a neighbour: its cuts are less even, never wrong, since a
    cut is only used when it falls strictly inside its range.
    """

    def __init__(self, prefix: str, sample: list[str]):
        suffixes = [k[len(prefix):] for k in sample if k.startswith(prefix)]
        self.prefix = prefix
        # Never NUL or a lone surrogate (a key read with surrogateescape): no name holds them.
        self.alphabet = sorted(c for c in set("".join(suffixes)) if c != "\0" and not "\ud800" <= c <= "\udfff") \
            or [chr(c) for c in range(0x21, 0x7F)]
        self.base = len(self.alphabet) + 1  # digit 0: the key has ended
        self.digits = min(64, max(map(len, suffixes), default=16) + 4)
        self.top = self.base ** self.digits  # above every key

    def number(self, key: str) -> int:
        suffix, n = key[len(self.prefix):], 0
        for i in range(self.digits):
            n = n * self.base + (bisect.bisect_right(self.alphabet, suffix[i]) if i < len(suffix) else 0)
        return n

    def key(self, number: int) -> str:
        digits = []
        for _ in range(self.digits):
            number, d = divmod(number, self.base)
            digits.append(d)
        while digits and digits[0] == 0:  # trailing zeros: a shorter key
            digits.pop(0)
        return self.prefix + "".join(self.alphabet[max(d, 1) - 1] for d in reversed(digits))

    def ahead(self, first: str, last: str) -> str | None:
        """The key as far after ``last`` as ``last`` is after ``first`` (None: past every key):
        where the range open to the prefix's end is cut, ``first`` being the listing's first
        key, so that each such cut leaves below it about as many keys as were listed before it.
        Halfway to the end of the key space is most often past the last key (a LIST for
        nothing, and again for each cut after it)."""
        top = self.number(last) + AHEAD * (self.number(last) - self.number(first))
        return self.key(top) if top < self.top else None

    def cut(self, after: str, upto: str | None) -> str | None:
        """A key strictly between ``after`` and ``upto`` (None: the end of the prefix), about
        halfway, or None where there is none to be found."""
        if not after.startswith(self.prefix) or (upto is not None and not upto.startswith(self.prefix)):
            return None
        high = self.top if upto is None else self.number(upto)
        middle = self.key((self.number(after) + high) // 2)
        for candidate in valid_names_near(middle, self.prefix):
            if key_order(after) < key_order(candidate) and (upto is None or key_order(candidate) < key_order(upto)):
                return candidate
        return None

    def remaining(self, first: str, last: str, listed: int, upto: str | None) -> float:
        """Keys still to come in a range that listed ``listed`` keys from ``first`` to ``last``,
        if the rest of it is as dense; in a range open to the prefix's end, as many again."""
        if upto is None:
            return listed
        if listed < 2:
            return float("inf")
        done = self.number(last) - self.number(first)
        return (listed - 1) * (self.number(upto) - self.number(last)) / max(1, done)
