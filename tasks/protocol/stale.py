"""Step 4 of the commit protocol (docs/FORMAT.md): what runs of a prefix that are gone left
behind, found and cleaned up under the lease. Open multipart uploads of the prefix's archive
and manifest, and the segment temporaries of every run but the one being assembled."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from s3arch.format.manifest import ArchiveLayout
from s3arch.io.multipart import abort_uploads, open_uploads
from s3arch.io.store import Store
from s3arch.produce.segments import SegmentPlan, delete_temporaries


def uploads_left(store: Store, layout: ArchiveLayout, archive_key: str) -> list[tuple[str, str]]:
    """(key, upload id) of the uploads open for the prefix's archive and manifest (listed per
    key, both at once: MinIO lists a key's uploads only for that exact key)."""
    keys = (archive_key, layout.manifest_key)
    with ThreadPoolExecutor(len(keys), thread_name_prefix="s3arch-uploads") as pool:
        found = pool.map(lambda key: open_uploads(store, layout.bucket, key), keys)
        return [(key, upload_id) for key, ids in zip(keys, found) for upload_id in ids]


def clean_stale(store: Store, layout: ArchiveLayout, archive_key: str, keep: SegmentPlan | None = None) -> int:
    """Abort the uploads and delete the segment temporaries of runs that are gone (all but
    ``keep``'s, the plan this run assembles), a large segment's records upload still open
    included; the uploads aborted. The three listings go out at once."""
    with ThreadPoolExecutor(2, thread_name_prefix="s3arch-clean") as pool:
        temporaries = pool.submit(delete_temporaries, store, layout, keep=keep)
        kept = keep.upload_id if keep else None
        aborted = abort_uploads(store, layout.bucket, [(key, upload_id) for key, upload_id
                                                       in uploads_left(store, layout, archive_key)
                                                       if upload_id != kept])
        return aborted + temporaries.result().uploads
