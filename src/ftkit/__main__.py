"""Allow ``python -m ftkit`` (also under mpirun)."""

import sys

from .cli import main

sys.exit(main())
