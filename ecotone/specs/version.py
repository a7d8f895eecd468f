"""The version of this ecotone (the distribution's, kept equal to pyproject.toml's by a test):
what servers report in `/metrics`, OpenAPI and MCP's `serverInfo`, and images carry as a label.
"""

from typing import Final

VERSION: Final = "0.2.0"
