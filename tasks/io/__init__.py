"""S3 I/O: clients, the data planes, listing, fetching, multipart upload, object attributes and Object Lock."""
