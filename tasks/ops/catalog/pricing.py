"""What a day costs a month: its archive, and its objects as they were, stored one by one, at
the job's prices (tasks/core/cost.py)."""

from __future__ import annotations

from s3arch.core.cost import estimate
from s3arch.ops.catalog.view import DayState


def price_day(d: DayState, storage_class: str, prices: dict) -> None:
    """Set ``d``'s monthly figures, when its storage class has a price and its summary counts."""
    if storage_class in prices and d.objects is not None and d.bytes_in is not None:
        # The objects' shortfall below 128 KiB is not in the summary: an upper bound of
        # zero keeps the one-by-one figure a floor, never an exaggeration.
        cost = estimate(storage_class, objects=d.objects, bytes_in=d.bytes_in, short_of_minimum=0,
                        archive_bytes=d.bytes_out or 0, prices=prices)
        d.archive_monthly_usd = round(cost.archive_monthly, 8)
        d.separate_monthly_usd = round(cost.separate_monthly, 8)
