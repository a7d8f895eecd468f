"""Bundled environments. Each registers through the package's `ecotone` entry points, exactly
as a third-party plugin would, and uses only the public contract (`import ecotone`)."""
