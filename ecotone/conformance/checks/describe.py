"""What describe() says, and whether observations and states match it."""

from __future__ import annotations

from ecotone.conformance.expect import expect, fail, is_number, show
from ecotone.conformance.generate import object_schema
from ecotone.conformance.registry import check
from ecotone.conformance.runner import Runner, Sample
from ecotone.conformance.schema import SchemaDefinitionError, refs, resolve, validate


@check("describe")
def check_describe(r: Runner) -> str:
    """describe() gives a name and object schemas for action, observation and state; the state
    schema has episode_id and step_count

    Raises:
        CheckFailed: the name is empty (or not a string); a schema is not a JSON Schema object, has
            a $ref that does not resolve, or is not an object schema; the state schema has no
            episode_id or no step_count.
    """
    info = r.info
    expect(
        isinstance(info.name, str) and info.name.strip(),
        "describe().name",
        "a non-empty name",
        show(info.name),
    )
    for kind in ("action", "observation", "state"):
        schema = getattr(info, f"{kind}_schema")
        what = f"describe().{kind}_schema"
        expect(isinstance(schema, dict) and schema, what, "a JSON Schema object", show(schema))
        for ref in refs(schema):
            try:
                resolve(ref, schema)
            except SchemaDefinitionError as exc:
                fail(what, "every $ref to resolve", str(exc))
        top = object_schema(schema)
        expect(
            top.get("type") == "object" or "properties" in top,
            what,
            'an object schema ("type": "object")',
            show(top),
        )
    properties = object_schema(info.state_schema).get("properties", {})
    missing = [name for name in ("episode_id", "step_count") if name not in properties]
    expect(
        not missing,
        "describe().state_schema properties",
        "episode_id and step_count (ecotone.State has both)",
        f"no {' and no '.join(missing)} among {show(sorted(properties))}",
    )
    return f"env {info.name!r}, version {info.version!r}"


@check(
    "observation_flags",
    openenv_skip=(
        "OpenEnv observations have no `truncated`, and ecotone's adapter fills in reward and "
        "done itself"
    ),
    seated=False,
)
def check_observation_flags(r: Runner) -> str:
    """every observation has reward (a number; null after reset), done and truncated (booleans)

    Raises:
        CheckFailed: an observation of the seeded episodes is not a JSON object, lacks reward, done
            or truncated, has a done or truncated that is not a boolean, or a reward that is not a
            number (null is allowed after a reset).
        CheckSkipped: no action the env accepts could be drawn.
    """
    count = 0
    for seed in r.settings.seeds:
        for sample in r.samples(seed):
            _flags_typed(sample, seed)
            count += 1
    return f"{count} observations"


def _flags_typed(sample: Sample, seed: int) -> None:
    obs = sample.observation
    where = f"observation {sample.label} (seed {seed})"
    expect(isinstance(obs, dict), where, "a JSON object", show(obs))
    for flag in ("reward", "done", "truncated"):
        expect(flag in obs, where, f"a `{flag}` field", f"no `{flag}` in {show(obs)}")
    for flag in ("done", "truncated"):
        expect(isinstance(obs[flag], bool), f"`{flag}` {where}", "true or false", show(obs[flag]))
    reward = obs["reward"]
    if sample.label == "after reset":
        expect(
            reward is None or is_number(reward),
            f"`reward` {where}",
            "a number or null",
            show(reward),
        )
    else:
        expect(is_number(reward), f"`reward` {where}", "a number", show(reward))


def _schema_check(r: Runner, kind: str) -> str:
    schema = getattr(r.info, f"{kind}_schema")
    count = 0
    for seed in r.settings.seeds:
        for sample in r.samples(seed):
            value = getattr(sample, kind)
            errors = validate(value, schema)
            count += 1
            if errors:
                fail(
                    f"{kind} {sample.label} (seed {seed})",
                    f"a value matching describe().{kind}_schema",
                    "; ".join(str(e) for e in errors[:3]),
                )
    return f"{count} {kind}s"


@check("observation_schema", seated=False)
def check_observation_schema(r: Runner) -> str:
    """observations match the observation schema from describe()

    Raises:
        CheckFailed: an observation of the seeded episodes does not match the observation schema.
        CheckSkipped: no action the env accepts could be drawn.
    """
    return _schema_check(r, "observation")


@check("state_schema", seated=False)
def check_state_schema(r: Runner) -> str:
    """states match the state schema from describe()

    Raises:
        CheckFailed: a state of the seeded episodes does not match the state schema.
        CheckSkipped: no action the env accepts could be drawn.
    """
    return _schema_check(r, "state")
