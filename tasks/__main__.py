import sys

from s3arch.cli import main

sys.exit(main())
