"""The benchmark scripts' sections of docs/benchmarks.md: each script owns one `## ` heading."""

from __future__ import annotations

from pathlib import Path


def replace_section(path: Path, heading: str, section: str) -> None:
    """Put `section` (which starts with `heading`) in place of that heading's section of the
    file at `path`, up to the next `## ` heading; append it if the file has none."""
    text = path.read_text() if path.exists() else ""
    start = text.find(heading)
    if start < 0:
        text = text.rstrip() + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(heading))
        rest = text[end + 1 :] if end >= 0 else ""
        text = text[:start] + section.rstrip() + "\n\n" + rest  # a blank line before the next
    path.write_text(text.rstrip() + "\n")
