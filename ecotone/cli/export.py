"""`ecotone export WHAT ENV`: what serves an env elsewhere, written here.

`k8s`: a Secret (the token), a hardened Pod and a Service, as YAML, for a one-off run; or, with
`--form deployment`, what an operator commits (a Deployment, its Service, autoscaler,
disruption budget, network policy, token and checkpoint storage), as a kustomize folder
(`--out DIR`). `space`: a Hugging Face Space folder (Docker SDK) serving the env with its web
UI. What was written, and how the token reaches clients, is said on stderr; stdout carries
only the YAML when it goes there. The env must be one installed here, as for `ecotone build`
(the image is built from what is installed)."""

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
        help="Kubernetes objects serving ENV, as YAML: a Pod (one-off) or a Deployment form",
    )
    k.add_argument("env", help="environment name (installed here)")
    k.add_argument("--image", required=True, help="the image `ecotone build` made")
    k.add_argument("--name", help="the objects' name (default: ecotone-ENV)")
    k.add_argument("--port", type=int, help="the server's port (8000)")
    k.add_argument("--token", help="the server's token (default: a new random one)")
    k.add_argument("--cpu", default="1", help="CPU request and limit (1)")
    k.add_argument("--memory", default="512Mi", help="memory request and limit (512Mi)")
    k.add_argument(
        "--form",
        choices=["pod", "deployment"],
        default="pod",
        help="pod: a Secret, a Pod and a Service, for a one-off run (default); deployment: "
        "a Deployment, Service, HorizontalPodAutoscaler, PodDisruptionBudget, NetworkPolicy, "
        "the token's Secret and a ReadWriteMany claim for checkpoints",
    )
    k.add_argument(
        "--out",
        help="write to this file (pod), or into this folder with a kustomization.yaml "
        "(deployment) (default: one YAML stream on stdout)",
    )
    d = k.add_argument_group("the deployment form")
    d.add_argument("--replicas", type=int, help="the Deployment's replicas (2)")
    d.add_argument("--min", type=int, dest="min_replicas", help="autoscaler's minimum (replicas)")
    d.add_argument("--max", type=int, dest="max_replicas", help="autoscaler's maximum (4 x min)")
    d.add_argument(
        "--allow-from",
        metavar="KEY=VALUE[,...]",
        help="the labels of the pods the NetworkPolicy admits (the trainer's; ecotone.client=true)",
    )
    d.add_argument("--max-sessions", type=int, help="sessions per server (the server's default)")
    d.add_argument("--storage", help="the checkpoint claim's size (1Gi)")
    d.add_argument("--storage-class", help="its storage class, with ReadWriteMany (default class)")
    d.add_argument(
        "--drain-timeout", type=float, help="seconds running episodes get on SIGTERM (30)"
    )
    d.add_argument(
        "--shutdown-timeout", type=float, help="seconds for the checkpoints, then the closes (10)"
    )
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


_DEPLOYMENT_ONLY = (
    "replicas",
    "min_replicas",
    "max_replicas",
    "allow_from",
    "max_sessions",
    "storage",
    "storage_class",
    "drain_timeout",
    "shutdown_timeout",
)


def _check_k8s(args: argparse.Namespace) -> None:
    """What both forms check first: quantities, and an env installed here."""
    from ecotone.kernel import Registry

    for flag, value in (("--cpu", args.cpu), ("--memory", args.memory)):
        if not QUANTITY.fullmatch(value):
            raise ValueError(f"{flag} {value!r} is not a Kubernetes quantity (1, 500m, 512Mi)")
    Registry.discover().env_spec(args.env)  # an env unknown here: a RegistryError naming it


def _export_k8s(args: argparse.Namespace) -> int:
    _check_k8s(args)
    if args.form == "deployment":
        return _export_deployment(args)
    given = [name for name in _DEPLOYMENT_ONLY if getattr(args, name) is not None]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise ValueError(f"{flags}: only with --form deployment")
    from ecotone.providers.contract import SERVE_PORT
    from ecotone.providers.k8s_manifests import manifests, render

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


def _export_deployment(args: argparse.Namespace) -> int:
    from ecotone.providers.contract import SERVE_PORT
    from ecotone.providers.k8s_deployment import (
        DeploymentOptions,
        deployment_manifests,
        parse_selector,
        write_kustomization,
    )
    from ecotone.providers.k8s_manifests import render

    options: DeploymentOptions = {
        "image": args.image,
        "name": args.name,
        "token": args.token,
        "port": args.port or SERVE_PORT,
        "cpu": args.cpu,
        "memory": args.memory,
    }
    if args.allow_from is not None:
        options["allow_from"] = parse_selector(args.allow_from)
    for name in _DEPLOYMENT_ONLY:
        value = getattr(args, name)
        if value is not None and name != "allow_from":
            options[name] = value  # type: ignore[literal-required]
    objects = deployment_manifests(args.env, **options)
    if args.out:
        written = write_kustomization(objects, args.out)
        print(
            f"ecotone: wrote {len(written)} files in {args.out}: kubectl apply -k "
            f"{shlex.quote(args.out)}",
            file=sys.stderr,
        )
    else:
        sys.stdout.write(render(list(objects.values())))
    secret, service = objects["secret.yaml"], objects["service.yaml"]
    policy = objects["network-policy.yaml"]["spec"]["ingress"][0]["from"][0]["podSelector"]
    selector = ",".join(f"{k}={v}" for k, v in policy["matchLabels"].items())
    print(
        f"ecotone: the server's token is in the Secret {secret['metadata']['name']!r}; pods "
        f"labelled {selector} reach the Service {service['metadata']['name']!r} on port "
        f"{service['spec']['ports'][0]['port']} with it; the autoscaler's occupancy metric "
        "needs a custom metrics adapter (docs/providers.md)",
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
