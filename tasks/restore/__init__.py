"""Reading archives back: Glacier restores, member reads, extraction to a bucket or a directory."""
