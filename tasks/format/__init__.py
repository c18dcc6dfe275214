"""The archive's format: the pax tar writer, the codecs, the manifest."""
