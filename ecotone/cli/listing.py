"""`ecotone list`: the installed environments, name patterns, transports and providers, each
with the distribution that brings it and the first line of its description."""

from __future__ import annotations

import argparse

from ecotone.kernel import Registry


def run_list(args: argparse.Namespace) -> int:
    """Print every section of the registry (`(none installed)` for an empty one); returns 0.

    An env whose class has a callable `status` gets a second line with what it says (how it
    runs here); a status that raises is reported, never fatal."""
    registry = Registry.discover()
    for title, entries in (
        ("environments", registry.environments()),
        ("environment name patterns", registry.environment_patterns()),
        ("transports", registry.transports()),
        ("providers", registry.providers()),
    ):
        print(f"{title}:")
        if not entries:
            print("  (none installed)")
        for name, entry in sorted(entries.items()):
            value = entry.value
            doc = value if isinstance(value, str) else getattr(value, "description", "")
            doc = doc or (value.__doc__ or "")
            doc = doc.strip().splitlines()[0] if doc.strip() else ""
            print(f"  {name:<12} from {entry.distribution:<16} {doc}")
            status = getattr(value, "status", None) if title == "environments" else None
            if callable(status):  # an env's word on how it runs here (the coding sandbox)
                try:
                    said = str(status())
                except Exception as exc:
                    said = f"status unknown: {type(exc).__name__}: {exc}"
                print(f"  {'':<12} {said}")
    return 0
