"""`python -m sleap_live`: the same command line as the `sleap-live` script."""

import sys

from sleap_live.stream.cli import main

sys.exit(main())
