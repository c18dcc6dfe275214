"""Development tools: embedded S3 servers, sample data, the demo. Not part of the engine."""
