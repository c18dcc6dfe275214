"""s3arch: pack an S3 prefix into one verified, indexed, compressed tar archive.

The engine is plain Python (no Airflow import): the Airflow operators in plugins/ and the
CLI (``python -m s3arch``) both drive ``archive_prefix``.
"""

from .config import ArchiveSpec, S3Url, parse_size
from .errors import ArchiverError
from .version import __version__


def archive_prefix(*args, **kwargs):
    from .archive import archive_prefix as run

    return run(*args, **kwargs)


__all__ = ["ArchiveSpec", "ArchiverError", "S3Url", "archive_prefix", "parse_size", "__version__"]
