"""`python -m ecotone` is the `ecotone` command."""

import sys

from ecotone.cli import main

sys.exit(main())
