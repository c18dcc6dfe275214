"""What an archive costs per month against the same objects stored one by one (docs/COST.md).

Prices are a small dated table of public list prices (us-east-1), overridable per job; nothing
is fetched at run time. Per storage class: storage per GB-month, PUT (or lifecycle transition)
requests per 1,000, the smallest size an object is billed as, the per-object metadata that
GLACIER and DEEP_ARCHIVE bill (32 KiB at the class rate plus 8 KiB at the STANDARD rate), and
the minimum storage duration. GB here is 2**30 bytes, as S3 bills it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from s3arch.core.errors import BadArgument

KiB = 1 << 10
GiB = 1 << 30
PRICES_AS_OF = "2026-11"
PRICES_REGION = "us-east-1"
# Objects per multipart part of an archive, for counting its requests: parts are 5-16 MiB.
_ASSUMED_PART = 8 << 20
# STANDARD_IA and GLACIER_IR bill every object as at least this (an override of
# min_object_bytes switches the minimum on or off; its size stays this one).
MIN_BILLABLE = 128 * KiB


@dataclass(frozen=True)
class ClassPrices:
    storage_gb_month: float
    put_per_1000: float
    min_object_bytes: int = 0
    overhead_class_bytes: int = 0
    overhead_standard_bytes: int = 0
    min_days: int = 0
    retrieval_per_gb: float = 0.0  # billed for reading an object of this class (a source being archived)


PRICES: dict[str, ClassPrices] = {
    "STANDARD": ClassPrices(0.023, 0.005),
    "STANDARD_IA": ClassPrices(0.0125, 0.01, min_object_bytes=MIN_BILLABLE, min_days=30, retrieval_per_gb=0.01),
    "ONEZONE_IA": ClassPrices(0.01, 0.01, min_object_bytes=MIN_BILLABLE, min_days=30, retrieval_per_gb=0.01),
    "GLACIER_IR": ClassPrices(0.004, 0.02, min_object_bytes=MIN_BILLABLE, min_days=90, retrieval_per_gb=0.03),
    "GLACIER": ClassPrices(0.0036, 0.03, overhead_class_bytes=32 * KiB, overhead_standard_bytes=8 * KiB, min_days=90),
    "DEEP_ARCHIVE": ClassPrices(0.00099, 0.05, overhead_class_bytes=32 * KiB, overhead_standard_bytes=8 * KiB,
                                min_days=180),
}


def prices_with(overrides: dict | None) -> dict[str, ClassPrices]:
    """The table with a job's overrides applied: {CLASS: {field: value, ...}, ...}."""
    table = dict(PRICES)
    known = {f.name for f in fields(ClassPrices)}
    for storage_class, values in (overrides or {}).items():
        if storage_class not in table:
            raise BadArgument(f"prices: unknown storage class {storage_class!r}",
                              hint=f"use one of {', '.join(table)}")
        unknown = set(values or {}) - known
        if unknown:
            raise BadArgument(f"prices.{storage_class}: unknown field(s) {', '.join(sorted(unknown))}",
                              hint=f"fields are {', '.join(sorted(known))}")
        table[storage_class] = replace(table[storage_class], **values)
    return table


@dataclass(frozen=True)
class CostEstimate:
    storage_class: str
    objects: int
    archive_monthly: float      # the archive object in its class
    separate_monthly: float     # the same objects stored one by one in that class, overhead included
    archive_requests: float     # one-time: the archive's multipart requests
    separate_requests: float    # one-time: one PUT (or transition) per object
    min_days: int
    prices_as_of: str = PRICES_AS_OF
    source_retrieval: float = 0.0  # one-time: retrieval fees for reading sources in IA/GLACIER_IR classes

    @classmethod
    def from_dict(cls, values: dict) -> "CostEstimate":
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})

    @property
    def monthly_saving(self) -> float:
        return self.separate_monthly - self.archive_monthly

    def to_dict(self) -> dict:
        return {**asdict(self), "monthly_saving": round(self.monthly_saving, 6)}

    def line(self) -> str:
        return (f"cost ({self.storage_class}, {PRICES_REGION} list prices of {self.prices_as_of}): "
                f"{usd(self.archive_monthly)}/month as one archive vs {usd(self.separate_monthly)}/month as "
                f"{self.objects:,} objects; one-time requests {usd(self.archive_requests)} vs "
                f"{usd(self.separate_requests)}; minimum storage {self.min_days} days"
                + (f"; reading the sources costs {usd(self.source_retrieval)} in retrieval fees"
                   if self.source_retrieval else ""))

    def __add__(self, other: "CostEstimate") -> "CostEstimate":
        return CostEstimate(self.storage_class if self.storage_class == other.storage_class else "mixed",
                            self.objects + other.objects, self.archive_monthly + other.archive_monthly,
                            self.separate_monthly + other.separate_monthly,
                            self.archive_requests + other.archive_requests,
                            self.separate_requests + other.separate_requests, max(self.min_days, other.min_days),
                            source_retrieval=self.source_retrieval + other.source_retrieval)


def estimate(storage_class: str, *, objects: int, bytes_in: int, short_of_minimum: int, archive_bytes: int,
             prices: dict[str, ClassPrices] | None = None,
             source_bytes_by_class: dict[str, int] | None = None) -> CostEstimate:
    """``short_of_minimum``: what the objects smaller than ``MIN_BILLABLE`` lack of it, in
    total (the listing counts it); it is billed only in classes with that minimum.
    ``source_bytes_by_class``: bytes of the sources per storage class as listed; reading those
    in STANDARD_IA, ONEZONE_IA and GLACIER_IR bills a retrieval fee per GB."""
    table = prices or PRICES
    p, standard = table[storage_class], table["STANDARD"]

    def monthly(n_objects: int, data_bytes: int) -> float:
        class_bytes = data_bytes + n_objects * p.overhead_class_bytes
        return (class_bytes / GiB) * p.storage_gb_month + \
            (n_objects * p.overhead_standard_bytes / GiB) * standard.storage_gb_month

    parts = max(1, -(-archive_bytes // _ASSUMED_PART))
    return CostEstimate(
        storage_class, objects,
        archive_monthly=monthly(1, max(archive_bytes, p.min_object_bytes)),
        separate_monthly=monthly(objects, bytes_in + (short_of_minimum if p.min_object_bytes else 0)),
        archive_requests=(parts + 2) * p.put_per_1000 / 1000,  # create, parts, complete
        separate_requests=objects * p.put_per_1000 / 1000,
        min_days=p.min_days,
        source_retrieval=sum(n / GiB * table[c].retrieval_per_gb
                             for c, n in (source_bytes_by_class or {}).items() if c in table))


def usd(amount: float) -> str:
    """Dollars, with cents where they matter and two significant digits below a cent."""
    if amount >= 0.01 or amount == 0:
        return f"${amount:,.2f}"
    return "$" + f"{float(f'{amount:.2g}'):.10f}".rstrip("0")


def short_of_minimum(size: int) -> int:
    """How much less than ``MIN_BILLABLE`` an object of ``size`` bytes is."""
    return max(0, MIN_BILLABLE - size)
