"""The release number of s3arch, in a module of its own: the manifest, the pipeline and the CLI name it
without importing the package's face (``s3arch/__init__``) from below. pyproject.toml carries
the same number."""

__version__ = "0.6.0"
