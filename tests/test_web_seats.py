"""The web UI's seats in a real browser (the system's headless Chromium through Playwright,
with tests/test_web_ui.py's fixtures, which fail a test on any script error or any request
to anywhere but the test's server): the owner's page hands out a link per seat, a tab per seat
plays it, chess by clicking the board's squares, and a spectator's tab watches; a seat's tab
left open keeps its seat past the server's lease, and downloads the seat's own trajectory.
Also: an env's SVG view is shown inline with everything but its drawing removed."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import ecotone
from ecotone.kernel.limits import Limits
from tests.conftest import RunningServer, run_server, wait_until
from tests.httpraw import Http
from tests.test_web_ui import UI, context, field_error, shown, ui  # noqa: F401 (fixtures)
from tests.web_envs import ViewEnvs

if TYPE_CHECKING:
    from playwright.sync_api import Page

try:
    from playwright.sync_api import expect
except ImportError:  # the `context` fixture skips every test (fails them on CI)
    pass


def click(page: Page, square: str) -> None:
    """A person's click on a square of the board the page shows."""
    page.locator(f"#render-view rect.square.{square}").click()


def move(page: Page, source: str, target: str) -> None:
    click(page, source)
    expect(page.locator("#render-view")).to_have_attribute("data-selected", source)
    click(page, target)


def seat_links(owner: Page) -> dict[str, str]:
    links = owner.locator("#seat-links a")
    expect(links).to_have_count(3)
    found = {
        str(links.nth(i).get_attribute("data-seat")): str(links.nth(i).get_attribute("href"))
        for i in range(3)
    }
    assert set(found) == {"white", "black", "spectator"}
    assert all(href.startswith("/web?seat=") for href in found.values())
    return found


def moves_played(owner: Page) -> Any:
    return owner.locator('#state-fields [data-key="moves"]')


def test_two_tabs_play_chess_by_clicking_while_a_spectator_watches(ui: UI) -> None:  # noqa: F811
    pytest.importorskip("chess")
    with run_server("chess-duel", web=True) as server:
        owner = ui.open(server)
        expect(owner.locator("#seats-panel")).to_be_visible()
        expect(owner.locator("#action-panel")).to_be_hidden()  # the seats play, not the owner
        links = seat_links(owner)
        white = ui.open(server, links["white"])
        black = ui.open(server, links["black"])
        watcher = ui.open(server, links["spectator"])
        plays: list[str] = []
        watcher.on("request", lambda r: plays.append(r.url) if "/play" in r.url else None)
        expect(white.locator("#turn")).to_have_text("yours (white)")
        expect(black.locator("#turn")).to_have_text("white")
        expect(watcher.locator("#turn")).to_have_text("white")
        expect(owner.locator("#turn")).to_have_text("white")
        expect(white.locator("#session-where")).to_have_text("seat white")
        assert "session" not in json.dumps(white.evaluate("document.body.dataset"))
        # each seat's board has its own side at the bottom: a1 lower left for white, upper
        # right for black
        for page, (x, y) in ((white, ("15", "330")), (black, ("330", "15"))):
            a1 = page.locator("#render-view rect.square.a1")
            assert (a1.get_attribute("x"), a1.get_attribute("y")) == (x, y)

        move(white, "e2", "e4")
        expect(black.locator("#turn")).to_have_text("yours (black)")  # it waited for its turn
        expect(white.locator("#turn")).to_have_text("black")
        for page in (white, black, watcher, owner):
            expect(page.locator("#render-view rect.lastmove.e4")).to_have_count(1)
            expect(shown(page, "last_move")).to_have_text("e2e4")
        expect(white.get_by_role("button", name="Play")).to_be_disabled()  # not its turn
        move(black, "e7", "e5")
        expect(white.locator("#turn")).to_have_text("yours (white)")
        move(white, "g1", "f3")
        expect(black.locator("#turn")).to_have_text("yours (black)")
        expect(moves_played(owner)).to_have_text("[e2e4, e7e5, g1f3]")

        # an illegal move by clicks: the server's error, and nothing changes
        move(black, "e5", "e3")
        expect(field_error(black, "move")).to_contain_text("'e5e3' is not a legal move here")
        expect(black.locator("#turn")).to_have_text("yours (black)")
        expect(shown(black, "last_move")).to_have_text("g1f3")
        expect(moves_played(owner)).to_have_text("[e2e4, e7e5, g1f3]")

        # the spectator sees the board and cannot move
        expect(watcher.locator("#render-view rect.lastmove.f3")).to_have_count(1)
        expect(watcher.locator("#action-panel")).to_be_hidden()
        click(watcher, "d7")
        click(watcher, "d5")
        expect(watcher.locator("#render-view")).not_to_have_attribute("data-selected", "d7")
        assert plays == []
        expect(shown(watcher, "legal_moves")).to_have_text("[]")

        # clicking another piece of one's own moves the selection, then the move goes on
        click(black, "g8")
        click(black, "b8")
        expect(black.locator("#render-view")).to_have_attribute("data-selected", "b8")
        click(black, "c6")
        expect(white.locator("#turn")).to_have_text("yours (white)")
        expect(moves_played(owner)).to_have_text("[e2e4, e7e5, g1f3, b8c6]")
        expect(field_error(black, "move")).to_be_empty()


def test_a_pawn_reaching_the_last_rank_becomes_a_queen_and_the_game_ends(
    ui: UI,  # noqa: F811
) -> None:
    pytest.importorskip("chess")
    with run_server("chess-duel", web=True) as server:
        owner = ui.open(server)
        owner.locator("#reset-options-box summary").click()
        owner.fill("#reset-options", '{"fen": "k7/4P3/1K6/8/8/8/8/8 w - - 0 1"}')
        owner.get_by_role("button", name="Reset").click()
        expect(owner.locator('#state-fields [data-key="fen"]')).to_have_text(
            "k7/4P3/1K6/8/8/8/8/8 w - - 0 1"
        )
        white = ui.open(server, seat_links(owner)["white"])
        black = ui.open(server, seat_links(owner)["black"])
        expect(white.locator("#turn")).to_have_text("yours (white)")
        move(white, "e7", "e8")  # a queen: mate
        expect(shown(white, "last_move")).to_have_text("e7e8q")
        for page in (white, black, owner):
            expect(page.locator("#turn")).to_have_text("nobody's: the game is over (1-0)")
        expect(white.locator("#reward")).to_have_text("1")
        expect(black.locator("#reward")).to_have_text("-1")
        expect(black.locator("#episode-end")).to_contain_text("Episode over (done)")
        # the owner's next game reaches the seats' open pages
        owner.fill("#reset-options", "{}")
        owner.get_by_role("button", name="Reset").click()
        expect(white.locator("#turn")).to_have_text("yours (white)")
        expect(black.locator("#turn")).to_have_text("white")
        expect(black.locator("#episode-end")).to_be_hidden()


def test_a_wrong_seat_link_says_so(ui: UI) -> None:  # noqa: F811
    pytest.importorskip("chess")
    with run_server("chess-duel", web=True) as server:
        page = ui.open(server, "/web?seat=not-a-key")
        expect(page.locator("#status")).to_contain_text("cannot take this seat: unknown_seat_key")


def test_an_svg_view_is_shown_inline_with_only_its_drawing(ui: UI) -> None:  # noqa: F811
    with run_server("svg_view", web=True, plugins=[ViewEnvs()]) as server:
        page = ui.open(server)
        view = page.locator("#render-view")
        expect(view).to_have_attribute("data-kind", "svg")
        expect(view.locator("svg text.count")).to_have_text("count 0")
        expect(view.locator("svg rect.square.a1")).to_have_count(1)
        for gone in ("script", "style", "image", "a", "foreignObject"):
            expect(view.locator(f"svg {gone}")).to_have_count(0)
        uses = view.locator("svg use")
        expect(uses).to_have_count(2)
        assert uses.nth(0).get_attribute("href") == "#dot"
        assert uses.nth(1).get_attribute("href") is None  # pointed outside the picture
        rect = view.locator("svg rect.a1")
        assert rect.get_attribute("onclick") is None and rect.get_attribute("style") is None
        assert view.locator("svg circle").get_attribute("fill") == "url(#shade)"
        assert view.locator("svg").get_attribute("onload") is None
        rect.click()  # a square, but this env's action has no move: nothing is sent
        assert page.evaluate("window.hacked") is None
        page.get_by_label("delta", exact=True).fill("2")
        page.get_by_role("button", name="Step").click()
        expect(view.locator("svg text.count")).to_have_text("count 2")
    with run_server("not_svg_view", web=True, plugins=[ViewEnvs()]) as server:
        page = ui.open(server)
        expect(page.locator("#render-view")).to_have_text("the env's SVG view is not valid SVG")


def test_the_single_agent_chess_board_is_played_by_clicking_too(ui: UI) -> None:  # noqa: F811
    pytest.importorskip("chess")
    with run_server("chess", web=True) as server:
        page = ui.open(server)
        expect(page.locator("#render-view")).to_have_attribute("data-kind", "svg")
        move(page, "e2", "e4")
        expect(page.locator("#step-count")).to_have_text("1")
        expect(shown(page, "agent_move")).to_have_text("e2e4")
        expect(page.locator("#render-view rect.square.e4")).to_have_count(1)
        move(page, "d2", "d5")  # illegal: the env's error next to `move`, no step
        expect(field_error(page, "move")).to_contain_text("'d2d5' is not a legal move here")
        expect(page.locator("#step-count")).to_have_text("1")
        # as black, the board turns: black's side at the bottom
        page.locator("#reset-options-box summary").click()
        page.fill("#reset-options", '{"color": "black"}')
        page.get_by_role("button", name="Reset").click()
        expect(shown(page, "color")).to_have_text("black")
        a1 = page.locator("#render-view rect.square.a1")
        expect(a1).to_have_attribute("y", "15")


def _cards_game(server: RunningServer, seed: int) -> tuple[Http, str, dict[str, Any]]:
    """A `cards` game opened and reset over HTTP (no owner's page): the owner's connection,
    the session id and the seat keys."""
    owner = Http(server.port)
    sid = owner.request("POST", "/v1/sessions", {"env": "cards"}).json()["session"]
    keys = owner.request("GET", f"/v1/sessions/{sid}/seats").json()
    assert owner.request("POST", f"/v1/sessions/{sid}/reset", {"seed": seed}).status == 200
    return owner, sid, keys


def _taken(connection: ecotone.Connection, key: str) -> bool:
    """Whether another connection holds the seat `key` gives (it is taken here otherwise)."""
    try:
        connection.join(key)
    except ecotone.ServerError as exc:
        assert exc.code == "seat_taken"
        return True
    return False


def test_a_seat_page_left_open_keeps_its_seat_past_the_lease_and_lets_it_go_once_closed(
    ui: UI,  # noqa: F811
) -> None:
    with run_server("cards", web=True, limits=Limits(lease=1.0)) as server:
        owner, sid, keys = _cards_game(server, seed=5)
        north = keys["keys"]["north"]
        page = ui.open(server, f"/web?seat={north}")
        pings: list[str] = []
        page.on("request", lambda r: pings.append(r.url) if r.url.endswith("/keepalive") else None)
        expect(page.locator("#turn")).to_have_text("yours (north)")  # the person thinks...
        expect(page.locator("body")).to_have_attribute("data-keepalive", "on")
        page.wait_for_timeout(3500)  # ...for three and a half leases, the page quiet but pings
        assert len(pings) >= 5, pings
        with ecotone.Connection.open_url(server.ws_url) as other:
            assert _taken(other, north)  # still the page's
            # and the session lives on: the page still plays its move
            hand = owner.request("GET", f"/v1/sessions/{sid}/state").json()["state"]["hands"]
            page.get_by_label("card", exact=True).fill(str(hand["north"][0]))
            page.get_by_role("button", name="Play").click()
            expect(page.locator("#turn")).to_have_text("south")
            # the page goes (pagehide: `leave`, the pings stop): once the lease runs out,
            # the seat is another connection's
            page.goto(server.url + "/health")
            assert wait_until(lambda: not _taken(other, north), timeout=10)
            count = len(pings)
            time.sleep(1.0)
            assert len(pings) == count  # no page pings it back


def test_a_seat_page_downloads_its_own_trajectory_never_the_other_hand(
    ui: UI,  # noqa: F811
    tmp_path: Path,
) -> None:
    with run_server("cards", web=True) as server:
        owner, sid, keys = _cards_game(server, seed=8)
        hands = owner.request("GET", f"/v1/sessions/{sid}/state").json()["state"]["hands"]
        pages = {seat: ui.open(server, f"/web?seat={keys['keys'][seat]}") for seat in keys["keys"]}
        watcher = ui.open(server, f"/web?seat={keys['spectate']}")
        laid: list[int] = []
        for seat in ("north", "south", "north"):  # three moves: south still holds two cards
            page = pages[seat]
            expect(page.locator("#turn")).to_have_text(f"yours ({seat})")
            laid.append(hands[seat][0] if seat == "south" else hands[seat][len(laid) // 2])
            page.get_by_label("card", exact=True).fill(str(laid[-1]))
            page.get_by_role("button", name="Play").click()
        expect(pages["north"].locator("#turn")).to_have_text("south")
        files = {}
        for name, page, label in (
            ("north", pages["north"], "Download my trajectory"),
            ("spectator", watcher, "Download the game (public views)"),
        ):
            with page.expect_download() as info:
                page.get_by_role("button", name=label).click()
            assert info.value.suggested_filename == f"cards-{name}.jsonl"
            files[name] = tmp_path / info.value.suggested_filename
            info.value.save_as(files[name])
    lines = [json.loads(line) for line in files["north"].read_text().splitlines()]
    header, reset, *steps = lines
    assert (header["seat"], header["session"]) == ("north", None)
    assert [s["seat"] for s in steps] == ["north", "south", "north"]
    assert [s["action"] and s["action"]["card"] for s in steps] == [laid[0], None, laid[2]]
    held_by_south = set(hands["south"]) - set(laid)
    for line in (reset, *steps):  # north's own hand only; south's unplayed cards nowhere
        observation = line["observation"]
        assert set(observation["hand"]) <= set(hands["north"])
        assert not held_by_south & {c for r in observation["table"] for c in r}
    assert sid not in files["north"].read_text()
    public = [json.loads(line) for line in files["spectator"].read_text().splitlines()]
    assert len(public) == len(lines) and public[0]["seat"] is None
    assert all(line["observation"]["hand"] == [] for line in public[1:])
