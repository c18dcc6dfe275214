"""The commit protocol: the lease, the steps from listing to manifest, deletion of sources."""
