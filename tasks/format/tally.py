"""What a listing's pages add up to for an archive, tallied page by page as they are listed:
the streamed run sizes its parts from it, the dry run reports it, the segment plan cuts by it."""

from __future__ import annotations

from typing import Callable

from s3arch.core.cost import short_of_minimum
from s3arch.format.tarwriter import member_size_bound
from s3arch.io.listed import ListedObject
from s3arch.io.listing import SourceClasses


class ListingTally:
    """Objects, bytes, tar bytes and the bytes short of the minimum billable size (for the
    cost figures, tasks/core/cost.py) of the pages added so far, and their source classes.
    ``member_bytes`` sizes one tar member: the bound by default (``member_size_bound``), the
    exact size where a plan cuts the tar stream (``member_size``)."""

    def __init__(self, member_bytes: Callable[[str, int], int] = member_size_bound) -> None:
        self._member_bytes = member_bytes
        self.objects = 0
        self.bytes = 0
        self.tar_bytes = 0
        self.short_of_min_billable = 0
        self.classes = SourceClasses()

    def add(self, page: list[ListedObject]) -> int:
        """Tallies one page; returns its tar bytes."""
        self.classes.add(page)
        tar = 0
        for o in page:
            tar += self._member_bytes(o.key, o.size)
            self.bytes += o.size
            self.short_of_min_billable += short_of_minimum(o.size)
        self.objects += len(page)
        self.tar_bytes += tar
        return tar
