"""s3arch: pack an S3 prefix into one verified, indexed, compressed tar archive.

The engine is plain Python (no Airflow import): the Airflow operators in plugins/ and the
CLI (``python -m s3arch``) both drive ``archive_prefix``.
"""

from s3arch.core.config import ArchiveSpec, S3Url, parse_size
from s3arch.core.errors import ArchiverError
from s3arch.core.version import __version__


def archive_prefix(*args, **kwargs):
    from s3arch.archive import archive_prefix as run

    return run(*args, **kwargs)


__all__ = ["ArchiveSpec", "ArchiverError", "S3Url", "archive_prefix", "parse_size", "__version__"]
