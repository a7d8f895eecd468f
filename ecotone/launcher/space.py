"""`ecotone export space ENV DIR`: a Hugging Face Space (Docker SDK) that serves one env with
its web UI.

    export_space("wordle", "spaces/wordle")          # then: git push it to a Space

The folder holds:

- `README.md`: the Space's front matter (`sdk: docker`, `app_port: 7860`, title, tags) and
  what the env is and how to connect to it;
- `Dockerfile`: the base image, one `COPY` of `site/`, `USER 1000` (Spaces run containers as
  uid 1000), and `ecotone serve ENV --host 0.0.0.0 --port 7860 --web`, so the Space's page is
  the web UI and its URL takes WebSocket and HTTP clients. No RUN step: it builds without
  network, on a Space and here alike.
- `site/`: ecotone, the env's distribution and their dependencies, installed for the base's
  Python on glibc Linux, exactly as `ecotone build` installs them (`images.py`, its cache too).

The server wants a token beyond loopback: set the Space secret `ECOTONE_AUTH_TOKEN` (else the
server makes one and prints it in the Space's log). Uploading is left to git or
`huggingface_hub`: nothing here talks to the Hub.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Final, TypedDict, Unpack

import attrs

from ecotone.kernel.registry import Registry
from ecotone.launcher.images import Progress, cache_root, containerfile, env_site, find_env_source
from ecotone.specs.keywords import from_keywords

SPACE_PORT: Final = 7860
"""What Spaces route to by default (`app_port`)."""
SPACE_USER: Final = "1000"
DEFAULT_SPACE_BASE: Final = "python:3.11-slim"


def dockerfile(env: str, base: str) -> str:
    """`ecotone build`'s Containerfile, as a Space runs it: port 7860, uid 1000, the web UI."""
    return containerfile(
        env, base, port=SPACE_PORT, user=SPACE_USER, serve_args=["--web"], environment="HOME=/tmp"
    )


def readme(env: str, description: str, title: str | None = None) -> str:
    title = title or f"ecotone {env}"
    front = {
        "title": title,
        "emoji": "🌿",
        "colorFrom": "green",
        "colorTo": "blue",
        "sdk": "docker",
        "app_port": SPACE_PORT,
        "pinned": False,
        "tags": ["ecotone", "reinforcement-learning", "rl-environment", env.split(":")[0]],
        "short_description": description[:60],
    }
    lines = ["---"]
    for key, value in front.items():
        lines.append(f"{key}: {json.dumps(value, ensure_ascii=False)}")
    lines.append("---")
    body = f"""
# {title}

{description}

This Space serves the ecotone environment `{env}`: its page is the environment's web UI, and
its URL takes ecotone clients over WebSocket and HTTP, and OpenEnv clients.

```python
import ecotone

with ecotone.connect("wss://OWNER-SPACE.hf.space", token="...") as env:
    result = env.reset(seed=0)
```

The server requires a token: set the Space secret `ECOTONE_AUTH_TOKEN` (otherwise the server
makes one and prints it in the Space's log). Open the Space once as `/?token=...`: the browser keeps
the token in a cookie from then on.
"""
    return "\n".join(lines) + "\n" + body


class SpaceOptions(TypedDict, total=False):
    """`export_space`'s keyword options, as its callers pass them (see `export_space`)."""

    base: str
    python_version: str
    title: str | None
    progress: Progress | None
    registry: Registry | None


@attrs.frozen(kw_only=True, slots=True)
class SpaceSettings:
    """An export's settings: `export_space`'s options once checked, with their defaults."""

    base: str = DEFAULT_SPACE_BASE
    python_version: str = "3.11"
    title: str | None = None
    progress: Progress | None = None
    registry: Registry | None = None


def export_space(env: str, out: Path | str, **options: Unpack[SpaceOptions]) -> Path:
    """Write the Space folder for `env` into `out` (created; must be empty if it exists).

    Keyword options (`SpaceOptions`; any other keyword is a TypeError that names it):

    - `base` (`DEFAULT_SPACE_BASE`, python:3.11-slim): the image the Dockerfile builds on;
    - `python_version` ("3.11"): the base's Python as X.Y, which `site/` is installed for;
    - `title` (None: "ecotone ENV"): the Space's title;
    - `progress` (None): called with a line for each stage of the host-side work;
    - `registry` (None: the installed plugins): where `env` is looked up.
    """
    space = from_keywords(SpaceSettings, options, "export_space")
    folder = Path(out)
    if folder.exists() and any(folder.iterdir()):
        raise ValueError(f"{folder} is not empty: export a Space into a new folder")
    made = not folder.exists()
    source = find_env_source(env, space.registry)
    registry = space.registry or Registry.discover()
    entry = registry.environments().get(env.split(":")[0]) if ":" not in env else None
    description = ""
    if entry is not None:
        description = str(getattr(entry.value, "description", "") or "")
    description = description or f"The `{env}` environment, served by ecotone."
    site = env_site(
        source, python_version=space.python_version, cache=cache_root(), progress=space.progress
    )
    folder.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copytree(site, folder / "site", symlinks=True)
        (folder / "Dockerfile").write_text(dockerfile(env, space.base), encoding="utf-8")
        (folder / "README.md").write_text(readme(env, description, space.title), encoding="utf-8")
        # Binary extension modules go to the Hub through Git LFS, as it wants for binaries.
        patterns = ("*.so", "*.so.*", "*.a", "*.whl", "*.bin", "*.zip", "*.gz")
        (folder / ".gitattributes").write_text(
            "".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n" for p in patterns),
            encoding="utf-8",
        )
    except BaseException:
        if made:
            shutil.rmtree(folder, ignore_errors=True)
        else:  # the caller's empty folder stays, emptied again
            for child in folder.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
        raise
    return folder


__all__ = [
    "DEFAULT_SPACE_BASE",
    "SPACE_PORT",
    "SpaceOptions",
    "SpaceSettings",
    "dockerfile",
    "export_space",
    "readme",
]
