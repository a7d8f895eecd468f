"""Envs for the web UI's tests: custom views of every kind (and broken ones), and an action
with nested objects, a list, a tagged union, a map and optional fields."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

import msgspec

import ecotone
from ecotone.plugins.counter import CounterAction, CounterObservation, CounterState

# --- envs with custom views ------------------------------------------------------------------


def tiny_png(width: int = 2, height: int = 2) -> bytes:
    """A valid RGB PNG, red and green stripes."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(
        b"\x00" + b"".join(b"\xff\x00\x00" if x % 2 else b"\x00\xff\x00" for x in range(width))
        for _ in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


class Counting(ecotone.Environment[CounterAction, CounterObservation, CounterState]):
    inline = True

    def __init__(self) -> None:
        self._state = CounterState()

    def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> Any:
        self._state = CounterState(episode_id=episode_id)
        return CounterObservation(count=0)

    def step(self, action: CounterAction) -> Any:
        self._state.count += action.delta
        self._state.step_count += 1
        return CounterObservation(count=self._state.count, reward=float(action.delta))

    def state(self) -> CounterState:
        return self._state


class MarkdownView(Counting):
    """Counts, and shows the count as markdown."""

    readme = "# Markdown view\n\nA counter whose view is **markdown**."
    render_kind = "markdown"

    def render(self) -> str:
        return f"## Count\n\nThe count is **{self._state.count}**."


class PictureView(Counting):
    """Counts, and shows a picture."""

    def render(self) -> bytes:
        return tiny_png(2 + self._state.count, 2)


class HtmlView(Counting):
    render_kind = "html"

    def render(self) -> str:
        return f"<p id='count' style='color: red'>{self._state.count}</p><script>1</script>"


class BrokenView(Counting):
    def render(self) -> str:
        raise RuntimeError("the view is broken")


class NumberView(Counting):
    def render(self) -> int:
        return 7


# --- an action with nesting: objects, a list of them, a tagged union, a map, optionals ------


class Point(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    x: Annotated[int, msgspec.Meta(ge=0, le=9)]
    y: Annotated[int, msgspec.Meta(ge=0, le=9)]


class Circle(msgspec.Struct, tag_field="kind", tag="circle", forbid_unknown_fields=True):
    r: Annotated[float, msgspec.Meta(gt=0)]


class Square(msgspec.Struct, tag_field="kind", tag="square", forbid_unknown_fields=True):
    side: int


class PlanAction(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=12)]
    points: Annotated[list[Point], msgspec.Meta(min_length=1, max_length=3)]
    shape: Circle | Square
    style: Literal["solid", "dashed"] = "solid"
    closed: bool = False
    weights: dict[str, float] = {}
    label: Point | None = None


class PlanObservation(ecotone.Observation, kw_only=True):
    plan: dict[str, Any] = {}


class PlanEnv(ecotone.Environment[PlanAction, PlanObservation, ecotone.State]):
    """Draws plans; the cell (5, 5) is taken, and the env refuses a point there."""

    inline = True

    def __init__(self) -> None:
        self._state = ecotone.State()

    def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> Any:
        self._state = ecotone.State(episode_id=episode_id)
        return PlanObservation()

    def step(self, action: PlanAction) -> Any:
        for i, point in enumerate(action.points):
            if (point.x, point.y) == (5, 5):
                raise ecotone.InvalidAction("the cell (5, 5) is taken", field=f"points.{i}.y")
        self._state.step_count += 1
        return PlanObservation(plan=msgspec.to_builtins(action), reward=len(action.points))

    def state(self) -> ecotone.State:
        return self._state


# --- SVG views: one with everything that must not survive, one that is no SVG -------------

HOSTILE_SVG = """<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"
 viewBox="0 0 100 100" width="100" height="100" onload="window.hacked = 1">
<script>window.hacked = 2</script>
<style>@import url(http://example.invalid/style.css); rect { fill: red }</style>
<rect class="square light a1" x="0" y="0" width="50" height="50" fill="#0a0"
 style="stroke: url(http://example.invalid/stroke.svg)" onclick="window.hacked = 3"/>
<circle id="dot" cx="75" cy="75" r="10" fill="url(#shade)"/>
<defs><linearGradient id="shade"><stop offset="0" stop-color="#00f"/></linearGradient></defs>
<use href="#dot" x="-10"/>
<use href="http://example.invalid/sprites.svg#dot"/>
<image href="http://example.invalid/picture.png" width="10" height="10"/>
<a href="javascript:window.hacked = 4"><text x="5" y="90">link</text></a>
<foreignObject width="100" height="100"><div xmlns="http://www.w3.org/1999/xhtml">
 <img src="http://example.invalid/tracker.png"/></div></foreignObject>
<text x="5" y="70" class="count">COUNT</text>
</svg>"""


class SvgView(Counting):
    """Counts, and draws an SVG full of what a page must never run or fetch."""

    render_kind = "svg"

    def render(self) -> str:
        return HOSTILE_SVG.replace("COUNT", f"count {self._state.count}")


class NotSvgView(Counting):
    render_kind = "svg"

    def render(self) -> str:
        return "<p>not a picture</p><svg"


class ViewEnvs:
    """The test envs above, as a plugin."""

    envs: ClassVar[dict[str, type]] = {
        "markdown_view": MarkdownView,
        "picture_view": PictureView,
        "html_view": HtmlView,
        "broken_view": BrokenView,
        "number_view": NumberView,
        "plan": PlanEnv,
        "svg_view": SvgView,
        "not_svg_view": NotSvgView,
    }

    @ecotone.hookimpl
    def ecotone_environments(self) -> Mapping[str, Any]:
        return self.envs
