"""`python -m ecotone.cli` is the `ecotone` command too (as it was when cli was one module)."""

import sys

from ecotone.cli import main

sys.exit(main())
