"""S3's timestamps, as its answers give them: the control client keeps them as text
(``botocore_hooks.engine_session``: botocore's dateutil parsing cost a listing most of its CPU)
and the few that are needed are parsed here."""

from __future__ import annotations

from datetime import datetime, timezone
from email.utils import parsedate_to_datetime


def parse_s3_time(value) -> datetime:
    """An S3 timestamp as an aware datetime: ISO 8601 text from XML bodies
    (2026-11-21T13:05:07.123Z), RFC 1123 text from headers (Sat, 21 Nov 2026 13:05:07 GMT),
    or a datetime already."""

    if isinstance(value, datetime):
        return value
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        parsed = parsedate_to_datetime(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
