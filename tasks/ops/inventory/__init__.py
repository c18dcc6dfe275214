"""Planning from S3 Inventory: a job's days and their sizes, read from the newest inventory
report of its source bucket instead of listing every day (docs/JOBS.md, "Planning from S3
Inventory").

A report is what S3 writes under an inventory configuration's destination,
``DEST-PREFIX/SOURCE-BUCKET/CONFIG-ID/``: one folder per report,
``YYYY-MM-DDTHH-MMZ/manifest.json`` (and ``manifest.checksum``, the manifest's MD5), naming
its data files (``data/....csv.gz`` or ``.parquet``) with their sizes and MD5 checksums. The
reader streams each data file once, checks its MD5, and keeps one counter per day, never the
keys, so a report of tens of millions of keys is planned in constant memory.

The plan only says which days hold data and how much: every day is still LISTed by the
archive run that archives it, and sources are deleted only from that run's verified
manifest, never on the inventory's word.

The package's modules: ``reports`` (finding the newest report and checking its manifest),
``data_file`` (a data file's bytes, hashed as they are read), ``csv_files`` and
``parquet_files`` (the rows of each format), ``tally`` (counting rows per day prefix),
``days`` (a report's days and their sizes) and ``planning`` (a backfill's plan from them).
"""
