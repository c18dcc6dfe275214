"""The format's objects in S3: manifests, their indexes and a day's parts, read and written
through the store (tasks/io/store.py)."""
