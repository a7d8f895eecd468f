"""`gridworld`: walk a seeded maze to the goal.

Action `{"move": "up" | "down" | "left" | "right"}`; anything else fails the schema and is an
`invalid_action` naming `move`. The observation has the agent's `position` as `[row, col]`
(row 0 at the top) and the grid as text. Rules are in `GridworldEnv`'s docstring.
"""

from __future__ import annotations

import random
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, TypedDict, Unpack

import ecotone

Move = Literal["up", "down", "left", "right"]
MOVES: Final[tuple[Move, ...]] = ("up", "down", "left", "right")
_DELTAS: Final[dict[str, tuple[int, int]]] = {
    "up": (-1, 0),
    "down": (1, 0),
    "left": (0, -1),
    "right": (0, 1),
}

EMPTY, WALL, GOAL, PIT, START, AGENT = ".", "#", "G", "X", "S", "A"
STEP_REWARD: Final = -0.01
GOAL_REWARD: Final = 1.0
PIT_REWARD: Final = -1.0
LEGEND: Final = "A agent, G goal, # wall, X pit, . floor"


class GridworldAction(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    move: Move


class GridworldObservation(ecotone.Observation, kw_only=True):
    position: tuple[int, int] = (0, 0)
    """The agent's cell as (row, col); row 0 is the top row, col 0 the left column."""
    grid: str = ""
    """The grid as text, one line per row: A agent, G goal, # wall, X pit, . floor."""
    bumped: bool = False
    """The last move ran into a wall or the edge, so the agent stayed where it was."""
    steps_left: int = 0
    """Steps before the episode is truncated."""


class GridworldState(ecotone.State, kw_only=True):
    layout: list[str] = []
    """The static grid, one string per row: # wall, G goal, X pit, . floor."""
    start: tuple[int, int] = (0, 0)
    goal: tuple[int, int] = (0, 0)
    position: tuple[int, int] = (0, 0)
    max_steps: int = 0
    seed: int | None = None


def shortest_path(
    layout: Sequence[str], start: tuple[int, int], goal: tuple[int, int]
) -> list[Move] | None:
    """The moves of a shortest safe path from start to goal (no walls, no pits), or None."""
    height, width = len(layout), len(layout[0])
    came: dict[tuple[int, int], tuple[tuple[int, int], Move] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            path: list[Move] = []
            link = came[cell]
            while link is not None:
                cell, move = link
                path.append(move)
                link = came[cell]
            return path[::-1]
        for move in MOVES:
            dr, dc = _DELTAS[move]
            nxt = (cell[0] + dr, cell[1] + dc)
            if 0 <= nxt[0] < height and 0 <= nxt[1] < width and nxt not in came:
                if layout[nxt[0]][nxt[1]] not in (WALL, PIT):
                    came[nxt] = (cell, move)
                    queue.append(nxt)
    return None


def generate_layout(
    rng: random.Random, size: int, wall_density: float, pits: int
) -> tuple[list[str], tuple[int, int], tuple[int, int]]:
    """A random size x size layout whose goal is reachable from the start; uses `rng` only."""
    cells = [(r, c) for r in range(size) for c in range(size)]
    n_walls = round(wall_density * (size * size - 2 - pits))
    for _ in range(1000):
        start, goal, *rest = rng.sample(cells, 2 + pits + n_walls)
        grid = [[EMPTY] * size for _ in range(size)]
        for i, (r, c) in enumerate(rest):
            grid[r][c] = PIT if i < pits else WALL
        grid[goal[0]][goal[1]] = GOAL
        rows = ["".join(row) for row in grid]
        if shortest_path(rows, start, goal) is not None:
            return rows, start, goal
    raise ValueError(  # pragma: no cover - needs densities the options refuse
        f"no solvable {size}x{size} layout with wall_density={wall_density} and pits={pits}"
    )


def parse_layout(layout: Sequence[str]) -> tuple[list[str], tuple[int, int], tuple[int, int]]:
    """A layout given as rows of `S` start, `G` goal, `#` wall, `X` pit, `.` floor."""
    rows = [str(row) for row in layout]
    if not rows or not rows[0] or any(len(row) != len(rows[0]) for row in rows):
        raise ValueError("layout must be a non-empty list of rows of equal length")
    found: dict[str, list[tuple[int, int]]] = {START: [], GOAL: []}
    for r, row in enumerate(rows):
        for c, ch in enumerate(row):
            if ch not in (EMPTY, WALL, GOAL, PIT, START):
                raise ValueError(f"layout has {ch!r} at row {r}, col {c}; use S G # X .")
            if ch in found:
                found[ch].append((r, c))
    if len(found[START]) != 1 or len(found[GOAL]) != 1:
        raise ValueError("layout must have exactly one S (start) and one G (goal)")
    start, goal = found[START][0], found[GOAL][0]
    rows = [row.replace(START, EMPTY) for row in rows]
    return rows, start, goal


class GridworldOptions(TypedDict, total=False):
    """What `reset` takes besides `seed` and `episode_id`."""

    size: int
    """Rows and columns of a random grid, 3 to 30 (default 5)."""
    wall_density: float
    """The share of cells that are walls, 0 to 0.4 (default 0.2)."""
    pits: int
    """Pits on a random grid, at most a quarter of its cells (default 0)."""
    max_steps: int | None
    """Steps before the episode is truncated (default: four per cell)."""
    layout: list[str] | None
    """A grid drawn as rows of text, instead of a random one (see `parse_layout`)."""


class GridworldEnv(ecotone.Environment[GridworldAction, GridworldObservation, GridworldState]):
    """Navigate a small grid to the goal, around walls and pits.

    Each step moves the agent one cell up, down, left or right. A move into a wall or off the
    grid leaves it in place (`bumped`). Reward: -0.01 per step; reaching the goal gives +1
    instead and ends the episode (done); stepping into a pit gives -1 instead and ends it
    (done). After `max_steps` steps without either, the episode is truncated.

    Reset options: `size` (grid side, 3..30, default 5), `wall_density` (share of free cells
    that are walls, 0..0.4, default 0.2), `pits` (number of pits, default 0), `max_steps`
    (default 4 * cells), and `layout` (rows of `S G # X .`; replaces the random layout). The
    layout, start and goal come from the seed; the goal is always reachable.
    """

    name = "gridworld"
    version = "1"
    description = "Walk a seeded grid to the goal around walls and pits."
    inline = True  # a few list lookups per step

    def __init__(self) -> None:
        self._state = GridworldState()
        self._bumped = False

    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        **options: Unpack[GridworldOptions],
    ) -> GridworldObservation:
        """A new grid: `layout` as given, or a random one of `size` (seeded); see
        `GridworldOptions` for the options and their defaults."""
        layout = options.get("layout")
        size = options.get("size", 5)
        wall_density = options.get("wall_density", 0.2)
        pits = options.get("pits", 0)
        max_steps = options.get("max_steps")
        if layout is not None:
            rows, start, goal = parse_layout(layout)
        else:
            if not 3 <= size <= 30:
                raise ValueError(f"size must be between 3 and 30, got {size}")
            if not 0.0 <= wall_density <= 0.4:
                raise ValueError(f"wall_density must be between 0 and 0.4, got {wall_density}")
            if not 0 <= pits <= size * size // 4:
                raise ValueError(f"pits must be between 0 and {size * size // 4}, got {pits}")
            rows, start, goal = generate_layout(random.Random(seed), size, wall_density, pits)
        cells = len(rows) * len(rows[0])
        limit = 4 * cells if max_steps is None else max_steps
        if limit < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self._state = GridworldState(
            episode_id=episode_id or uuid.uuid4().hex,
            layout=rows,
            start=start,
            goal=goal,
            position=start,
            max_steps=limit,
            seed=seed,
        )
        self._bumped = False
        return self._observe()

    def step(self, action: GridworldAction) -> GridworldObservation:
        st = self._state
        st.step_count += 1
        dr, dc = _DELTAS[action.move]
        r, c = st.position[0] + dr, st.position[1] + dc
        inside = 0 <= r < len(st.layout) and 0 <= c < len(st.layout[0])
        self._bumped = not inside or st.layout[r][c] == WALL
        if not self._bumped:
            st.position = (r, c)
        cell = st.layout[st.position[0]][st.position[1]]
        if cell == GOAL:
            return self._observe(GOAL_REWARD, done=True)
        if cell == PIT:
            return self._observe(PIT_REWARD, done=True)
        return self._observe(STEP_REWARD, truncated=st.step_count >= st.max_steps)

    def _observe(
        self, reward: float | None = None, *, done: bool = False, truncated: bool = False
    ) -> GridworldObservation:
        st = self._state
        rows = [list(row) for row in st.layout]
        rows[st.position[0]][st.position[1]] = AGENT
        return GridworldObservation(
            position=st.position,
            grid="\n".join("".join(row) for row in rows),
            bumped=self._bumped,
            steps_left=max(st.max_steps - st.step_count, 0),
            reward=reward,
            done=done,
            truncated=truncated,
        )

    def state(self) -> GridworldState:
        return self._state

    def load_state(self, state: GridworldState) -> None:
        """Put a saved episode back (its State holds all of it: snapshots, forks)."""
        self._state = state
        self._bumped = False  # only the last observation says it, and the snapshot keeps that

    def render(self) -> str:
        """The grid as text with its legend: the custom view the web UI shows."""
        st = self._state
        if not st.layout:
            return "(no episode yet: reset to start one)"
        grid = self._observe().grid
        status = f"step {st.step_count} of {st.max_steps}, at {st.position}"
        return f"{grid}\n\n{LEGEND}\n{status}"

    def sample_action(self, rng: random.Random) -> GridworldAction:
        """A random move (every move is valid: a blocked one just bumps)."""
        return GridworldAction(move=rng.choice(MOVES))

    def close(self) -> None:
        pass


@ecotone.hookimpl
def ecotone_environments() -> Mapping[str, Any]:
    return {"gridworld": GridworldEnv}
