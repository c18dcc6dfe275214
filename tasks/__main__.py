import sys

from s3arch.cli import command

sys.exit(command())
