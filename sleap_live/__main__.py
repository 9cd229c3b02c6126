"""`python -m sleap_live`: the same command line as the `sleap-live` script."""

import sys

from sleap_live.cli import main

if __name__ == "__main__":
    sys.exit(main())
