"""``python -m attnclaims``: the command line (the same as the ``attnclaims`` script)."""
import sys

from attnclaims.cli import main

if __name__ == "__main__":
    sys.exit(main())
