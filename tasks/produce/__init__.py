"""Producing an archive's bytes: the member loop, the producers, and segments made elsewhere."""
