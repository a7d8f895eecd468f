"""`ecotone export WHAT ENV`: what serves an env elsewhere, written here.

`k8s`: a Secret (the token), a hardened Pod and a Service, as one YAML stream whose documents
are written as JSON (which YAML reads: `kubectl apply -f` takes it as it is); `space`: a
Hugging Face Space folder (Docker SDK) serving the env with its web UI. What was written, and
how the token reaches clients, is said on stderr; stdout carries only the manifests when they
go there. The env must be one installed here, as for `ecotone build` (the image is built from
what is installed)."""

from __future__ import annotations

import argparse
import re
import shlex
import sys

# A Kubernetes quantity (`1`, `500m`, `0.5`, `512Mi`, `1G`, `1e3`): checked here, so that a
# typo is an error naming the flag rather than a manifest the API server refuses.
QUANTITY = re.compile(r"[+]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[numkMGTPE]|[KMGTPE]i)?")


def export_arguments(p: argparse.ArgumentParser) -> None:
    """`export`'s two subcommands, `space` and `k8s`, with their flags (`what` names which)."""
    export = p.add_subparsers(dest="what", required=True, metavar="WHAT")
    sp = export.add_parser(
        "space", help="a Hugging Face Space folder (Docker SDK) serving ENV with its web UI"
    )
    sp.add_argument("env", help="environment name (installed here)")
    sp.add_argument("dir", help="the folder to write (new, or empty)")
    sp.add_argument("--base", help="the image to build on (python:3.11-slim)")
    sp.add_argument("--python", help="the base image's Python as X.Y (3.11)")
    sp.add_argument("--title", help="the Space's title (ecotone ENV)")
    k = export.add_parser(
        "k8s",
        help="a Secret (the token), a hardened Pod and a Service serving ENV: one YAML stream "
        "of JSON documents",
    )
    k.add_argument("env", help="environment name (installed here)")
    k.add_argument("--image", required=True, help="the image `ecotone build` made")
    k.add_argument("--name", help="the objects' name (default: ecotone-ENV)")
    k.add_argument("--port", type=int, help="the server's port (8000)")
    k.add_argument("--token", help="the server's token (default: a new random one)")
    k.add_argument("--cpu", default="1", help="CPU request and limit (1)")
    k.add_argument("--memory", default="512Mi", help="memory request and limit (512Mi)")
    k.add_argument("--out", metavar="FILE", help="write to this file (default: stdout)")
    for command in (sp, k):
        command.add_argument(
            "-v",
            "--verbose",
            action="store_true",
            default=argparse.SUPPRESS,
            help="log more to stderr, and show the traceback of an error",
        )


def run_export(args: argparse.Namespace) -> int:
    """Write what `args.what` names; returns 0."""
    if args.what == "space":
        return _export_space(args)
    return _export_k8s(args)


def _export_k8s(args: argparse.Namespace) -> int:
    from ecotone.kernel import Registry
    from ecotone.providers.contract import SERVE_PORT
    from ecotone.providers.k8s_manifests import manifests, render

    for flag, value in (("--cpu", args.cpu), ("--memory", args.memory)):
        if not QUANTITY.fullmatch(value):
            raise ValueError(f"{flag} {value!r} is not a Kubernetes quantity (1, 500m, 512Mi)")
    Registry.discover().env_spec(args.env)  # an env unknown here: a RegistryError naming it

    objects = manifests(
        args.env,
        image=args.image,
        name=args.name,
        port=args.port or SERVE_PORT,
        token=args.token,
        cpu=args.cpu,
        memory=args.memory,
    )
    text = render(objects)
    secret, _, service = objects
    if args.out:
        try:
            with open(args.out, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as exc:
            raise ValueError(f"--out {args.out}: {exc.strerror or exc}") from None
        print(
            f"ecotone: wrote {args.out}: kubectl apply -f {shlex.quote(args.out)}", file=sys.stderr
        )
    else:
        sys.stdout.write(text)
    print(
        f"ecotone: the server's token is in the Secret {secret['metadata']['name']!r}; clients "
        f"reach the Service {service['metadata']['name']!r} on port "
        f"{service['spec']['ports'][0]['port']} with it",
        file=sys.stderr,
    )
    return 0


def _export_space(args: argparse.Namespace) -> int:
    from ecotone.launcher.space import DEFAULT_SPACE_BASE, SPACE_PORT, export_space

    folder = export_space(
        args.env,
        args.dir,
        base=args.base or DEFAULT_SPACE_BASE,
        python_version=args.python or "3.11",
        title=args.title,
        progress=lambda message: print(f"ecotone: {message}", file=sys.stderr),
    )
    print(
        f"ecotone: wrote the Space {folder}: push it to a Space of the Docker SDK (its page "
        f"serves the web UI on port {SPACE_PORT}); set the secret ECOTONE_AUTH_TOKEN there",
        file=sys.stderr,
    )
    return 0
