"""The rows of a Parquet report's data file: spooled to a temporary file (its footer comes
last), then its key and size columns read a batch at a time (pyarrow, the ``inventory`` extra)."""

from __future__ import annotations

import tempfile

from s3arch.core.errors import BadArgument
from s3arch.ops.inventory.data_file import CHUNK, HashedBody
from s3arch.ops.inventory.tally import Tally


def tally_parquet(raw: HashedBody, tally: Tally) -> None:
    """Parquet needs its footer first: the file goes to a temporary file (streamed, hashed on
    the way), then its key and size columns are read a batch at a time."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise BadArgument("the inventory report is Parquet, which needs pyarrow",
                          hint="pip install 's3arch[inventory]', or set the inventory configuration's format to CSV") from None

    with tempfile.TemporaryFile(prefix="s3arch-inventory-") as spool:
        while chunk := raw.read(CHUNK):
            spool.write(chunk)
        spool.seek(0)
        parquet = pq.ParquetFile(spool)
        names = set(parquet.schema_arrow.names)
        if not {"key", "size"} <= names:
            raise BadArgument(f"inventory data file has no {'size' if 'key' in names else 'key'} column",
                              hint="add Size to the inventory configuration's optional fields")
        wanted = ["key", "size", *(c for c in ("is_latest", "is_delete_marker") if c in names)]
        for batch in parquet.iter_batches(batch_size=65_536, columns=wanted):
            values = batch.to_pydict()
            latest = values.get("is_latest") or [True] * batch.num_rows
            markers = values.get("is_delete_marker") or [False] * batch.num_rows
            tally.rows += batch.num_rows
            for key, size, is_latest, is_marker in zip(values["key"], values["size"], latest, markers):
                if is_latest is not False and not is_marker:
                    tally.add(key, size or 0)
