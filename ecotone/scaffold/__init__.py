"""`ecotone init NAME`: scaffold a pip-installable environment plugin distribution.

The result installs with `pip install -e NAME`, registers its env through the `ecotone` entry
point group, serves with `ecotone serve NAME`, passes `ecotone validate NAME`, and carries its
own tests (the conformance suite plus rule tests) and a Containerfile.
"""

from __future__ import annotations

import keyword
import re
from importlib import resources
from pathlib import Path

TEMPLATE_PACKAGE = "ecotone.scaffold.templates"
_NAME = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")


class ScaffoldError(ValueError):
    """The name or the target directory cannot be used."""


def names(name: str) -> dict[str, str]:
    """The spellings a template needs: env name, distribution, package, class prefix."""
    if not _NAME.match(name):
        raise ScaffoldError(
            f"{name!r} is not a usable env name: use lower-case letters, digits, '-' or '_', "
            "starting with a letter (e.g. 'maze' or 'grid-maze')"
        )
    package = name.replace("-", "_")
    if keyword.iskeyword(package):
        raise ScaffoldError(f"{name!r} is a Python keyword; pick another name")
    camel = "".join(part.capitalize() for part in re.split(r"[-_]", name))
    return {
        "env_name": name,
        "dist_name": f"ecotone-{name}" if not name.startswith("ecotone") else name,
        "package": package,
        "Camel": camel,
    }


def _render(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    return text


def scaffold(name: str, directory: str | Path | None = None) -> Path:
    """Write the distribution into `directory` (default: ./NAME); return its path."""
    values = names(name)
    target = Path(directory) if directory is not None else Path(name)
    if target.exists() and any(target.iterdir()):
        raise ScaffoldError(f"{target} exists and is not empty; pick another directory")
    root = resources.files(TEMPLATE_PACKAGE) / "env"
    written = 0
    for path in _walk(root):
        relative = path.relative_to(_as_path(root))
        if relative.suffix != ".tmpl":
            continue
        out = target / _render(str(relative), values).removesuffix(".tmpl")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(_render(path.read_text(), values))
        written += 1
    if not written:  # pragma: no cover - a packaging bug
        raise ScaffoldError("the env template is missing from this ecotone installation")
    return target


def _as_path(root: object) -> Path:
    return Path(str(root))


def _walk(root: object) -> list[Path]:
    base = _as_path(root)
    return sorted(p for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
