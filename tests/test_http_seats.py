"""Seats over HTTP against real servers: the seat key is the capability. Each key's requests
act as a holder of their own (never as the session's owner), read that seat's view only,
and never learn the session's id; errors come with the other routes' statuses."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ecotone
import ecotone.recording
from ecotone.kernel.config import AuthConfig
from ecotone.kernel.limits import Limits
from tests.conftest import RunningServer, run_server, wait_until
from tests.httpraw import Http, Reply


@pytest.fixture
def chess_server() -> Iterator[RunningServer]:
    pytest.importorskip("chess")
    with run_server("chess-duel", transport="http") as server:
        yield server


def _game(owner: Http, env: str, seed: int = 0) -> tuple[str, dict[str, Any]]:
    """A session of `env` opened and reset by `owner`; its id and seat keys."""
    opened = owner.request("POST", "/v1/sessions", {"env": env})
    assert opened.status == 200, opened
    sid = opened.json()["session"]
    keys = owner.request("GET", f"/v1/sessions/{sid}/seats")
    assert keys.status == 200, keys
    assert owner.request("POST", f"/v1/sessions/{sid}/reset", {"seed": seed}).status == 200
    return sid, keys.json()


def _view(client: Http, key: str, query: str = "") -> dict[str, Any]:
    reply = client.request("GET", f"/v1/seats/{key}{query}")
    assert reply.status == 200, reply
    assert reply.json()["op"] == "seat_view"
    return dict(reply.json())


def _play(client: Http, key: str, action: Any) -> Reply:
    return client.request("POST", f"/v1/seats/{key}/play", {"action": action})


def _error(reply: Reply, status: int, code: str) -> dict[str, Any]:
    assert (reply.status, reply.json()["op"], reply.json()["code"]) == (status, "error", code)
    return dict(reply.json())


def test_two_http_clients_play_chess_by_their_keys_to_the_end(
    chess_server: RunningServer,
) -> None:
    owner, white, black = (Http(chess_server.port) for _ in range(3))
    sid, keys = _game(owner, "chess-duel")
    w, b = keys["keys"]["white"], keys["keys"]["black"]
    joined = white.request("POST", f"/v1/seats/{w}/join")
    assert joined.status == 200
    assert joined.json() == {
        "op": "joined",
        "id": joined.json()["id"],
        "env": "chess-duel",
        "seat": "white",
        "seats": ["white", "black"],
        "lease": 300.0,  # the seat's lease, as long as a session's
    }
    assert white.request("POST", f"/v1/seats/{w}/join").json()["seat"] == "white"  # again: ok
    first = _view(white, w)
    assert first["seat"] == "white" and first["turn"] == "white"
    assert "e2e4" in first["observation"]["legal_moves"]
    assert _view(black, b)["observation"]["legal_moves"] == []  # not its turn: no moves
    # the fool's mate, each side by its own key (black joins on first use)
    for client, key, move, turn in (
        (white, w, "f3", "black"),
        (black, b, "e7e5", "white"),
        (white, w, "g2g4", "black"),
        (black, b, "Qh4", None),
    ):
        played = _play(client, key, {"move": move})
        assert played.status == 200, played
        assert played.json()["turn"] == turn
    end_white, end_black = _view(white, w), _view(black, b)
    assert end_white["observation"]["result"] == "0-1"
    assert (end_white["observation"]["reward"], end_black["observation"]["reward"]) == (-1, 1)
    assert end_white["observation"]["done"] and end_black["observation"]["done"]
    _error(_play(white, w, {"move": "e2e4"}), 409, "episode_done")
    state = owner.request("GET", f"/v1/sessions/{sid}/state").json()["state"]
    assert state["moves"] == ["f2f3", "e7e5", "g2g4", "d8h4"]


def test_a_key_reads_its_own_seat_only_and_never_learns_the_session_id(
    chess_server: RunningServer,
) -> None:
    owner, white, black = (Http(chess_server.port) for _ in range(3))
    sid, keys = _game(owner, "chess-duel")
    w, b = keys["keys"]["white"], keys["keys"]["black"]
    bodies = [
        white.request("POST", f"/v1/seats/{w}/join").body,
        white.request("GET", f"/v1/seats/{w}").body,
        white.request("GET", f"/v1/seats/{w}/render").body,
        _play(white, w, {"move": "e4"}).body,
        _play(white, w, {"move": "e5"}).body,  # an error names the session: not here
        black.request("GET", f"/v1/seats/{b}").body,
        _play(black, b, {"move": "e2e4"}).body,  # illegal: an error
        black.request("POST", f"/v1/seats/{w}/join").body,  # the key, not the client, holds
    ]
    for body in bodies:
        assert sid.encode() not in body
        assert '"session"' not in body.decode()
    assert json.loads(bodies[-1])["seat"] == "white"
    assert json.loads(bodies[4])["code"] == "not_your_turn"
    # the black seat's view has its own moves, the white seat's none now
    assert "e7e5" in _view(black, b)["observation"]["legal_moves"]
    assert _view(white, w)["observation"]["legal_moves"] == []


def test_wrong_key_out_of_turn_and_a_spectator_playing_are_clear_errors(
    chess_server: RunningServer,
) -> None:
    owner, white, black, watcher = (Http(chess_server.port) for _ in range(4))
    sid, keys = _game(owner, "chess-duel")
    w, b, s = keys["keys"]["white"], keys["keys"]["black"], keys["spectate"]
    for path in ("", "/render"):
        _error(white.request("GET", f"/v1/seats/not-a-key{path}"), 404, "unknown_seat_key")
    _error(white.request("POST", "/v1/seats/not-a-key/join"), 404, "unknown_seat_key")
    _error(_play(white, "not-a-key", {"move": "e4"}), 404, "unknown_seat_key")
    refused = _error(_play(black, b, {"move": "e5"}), 409, "not_your_turn")
    assert refused["details"] == {"seat": "black", "turn": "white"}
    bad = _error(_play(white, w, {"move": "e2e5"}), 422, "invalid_action")
    assert bad["details"]["field"] == "move"
    _error(_play(watcher, s, {"move": "e4"}), 403, "forbidden")
    public = _view(watcher, s)
    assert public["seat"] is None and public["observation"]["legal_moves"] == []
    assert public["turn"] == "white"
    _error(white.request("POST", f"/v1/seats/{w}/play", {"move": "e4"}), 400, "invalid_frame")
    _error(white.request("GET", f"/v1/seats/{w}?wait=maybe"), 422, "invalid_argument")
    _error(white.request("GET", f"/v1/seats/{w}?wait=1&timeout=900"), 422, "invalid_argument")
    _error(white.request("GET", f"/v1/seats/{w}?wait=1&timeout=nan"), 422, "invalid_argument")
    # nothing moved, and the game goes on
    assert owner.request("GET", f"/v1/sessions/{sid}/state").json()["state"]["moves"] == []
    assert _play(white, w, {"move": "e4"}).status == 200
    assert _view(watcher, s)["observation"]["last_move"] == "e2e4"
    # a closed session's keys are unknown
    assert owner.request("DELETE", f"/v1/sessions/{sid}").status == 200
    _error(_play(black, b, {"move": "e5"}), 404, "unknown_seat_key")
    _error(watcher.request("GET", f"/v1/seats/{s}"), 404, "unknown_seat_key")
    # only the owner gets the keys
    _error(owner.request("GET", f"/v1/sessions/{sid}/seats"), 404, "unknown_session")


def test_a_waiting_view_returns_at_the_seats_turn_and_is_bounded(
    chess_server: RunningServer,
) -> None:
    owner, white, black = (Http(chess_server.port) for _ in range(3))
    _, keys = _game(owner, "chess-duel")
    w, b = keys["keys"]["white"], keys["keys"]["black"]
    waited: list[dict[str, Any]] = []
    waiter = threading.Thread(target=lambda: waited.append(_view(black, b, "?wait=1")))
    waiter.start()
    time.sleep(0.3)
    assert waited == []  # black waits for its turn
    assert _play(white, w, {"move": "d4"}).status == 200
    waiter.join(timeout=10)
    assert waited and waited[0]["turn"] == "black"
    assert waited[0]["observation"]["last_move"] == "d2d4"
    started = time.monotonic()
    bounded = _view(white, w, "?wait=1&timeout=0.3")  # white's turn does not come
    assert time.monotonic() - started >= 0.25
    assert bounded["turn"] == "black" and bounded["observation"]["legal_moves"] == []
    assert _view(black, b, "?wait=true")["turn"] == "black"  # its turn now: at once


def test_each_seat_and_the_spectator_get_their_own_board_picture(
    chess_server: RunningServer,
) -> None:
    owner, white, black, watcher = (Http(chess_server.port) for _ in range(4))
    sid, keys = _game(owner, "chess-duel")
    w, b, s = keys["keys"]["white"], keys["keys"]["black"], keys["spectate"]
    assert _play(white, w, {"move": "e4"}).status == 200

    def square_at_bottom_left(reply: Reply) -> str:
        assert reply.status == 200, reply
        frame = reply.json()
        assert (frame["op"], frame["kind"]) == ("rendered", "svg")
        svg = frame["content"]
        assert re.search(r'class="square light lastmove e4"', svg)  # the last move is marked
        bottom = re.findall(r'<rect x="15" y="330"[^>]*class="square \w+ (\w\d)"', svg)
        return bottom[0]

    assert square_at_bottom_left(white.request("GET", f"/v1/seats/{w}/render")) == "a1"
    assert square_at_bottom_left(black.request("GET", f"/v1/seats/{b}/render")) == "h8"
    assert square_at_bottom_left(watcher.request("GET", f"/v1/seats/{s}/render")) == "a1"
    assert square_at_bottom_left(owner.request("GET", f"/v1/sessions/{sid}/render")) == "a1"


def test_a_key_held_over_http_is_taken_back_by_a_connection_after_leave(
    chess_server: RunningServer,
) -> None:
    owner, white = Http(chess_server.port), Http(chess_server.port)
    sid, keys = _game(owner, "chess-duel")
    w = keys["keys"]["white"]
    assert _view(white, w)["seat"] == "white"  # joined on first use
    with ecotone.Connection.open_url(chess_server.ws_url) as connection:
        with pytest.raises(ecotone.ServerError) as caught:
            connection.join(w)
        assert caught.value.code == "seat_taken"
        left = white.request("POST", f"/v1/seats/{w}/leave")
        assert (left.status, left.json()) == (200, {"left": True})
        assert white.request("POST", f"/v1/seats/{w}/leave").json() == {"left": False}
        seat = connection.join(w)  # a dropped seat: the same key takes it back
        assert seat.play({"move": "e4"}).turn == "black"
        # now a connection holds it: the key's HTTP requests are refused
        taken = white.request("GET", f"/v1/seats/{w}")
        message = _error(taken, 409, "seat_taken")["message"]
        assert sid.encode() not in taken.body and "of session (hidden)" in message
    # the connection went: the key's next HTTP request takes the seat back
    replies: list[Reply] = []

    def taken_back() -> bool:
        replies.append(white.request("GET", f"/v1/seats/{w}"))
        return replies[-1].status == 200

    assert wait_until(taken_back, timeout=30, step=0.05), replies[-1]
    reply = replies[-1]
    assert reply.json()["seat"] == "white"
    assert reply.json()["observation"]["last_move"] == "e2e4"


def test_the_cards_hands_never_leak_over_http() -> None:
    with run_server("cards", transport="http") as server:
        owner, north, south, watcher = (Http(server.port) for _ in range(4))
        sid, keys = _game(owner, "cards")
        clients = {"north": (north, keys["keys"]["north"]), "south": (south, keys["keys"]["south"])}
        for seed in range(4):
            reset = owner.request("POST", f"/v1/sessions/{sid}/reset", {"seed": seed})
            assert reset.status == 200
            dealt = owner.request("GET", f"/v1/sessions/{sid}/state").json()["state"]["hands"]
            while True:
                public = _view(watcher, keys["spectate"])
                assert public["observation"]["hand"] == []
                turn = public["turn"]
                if turn is None:
                    break
                for name, (client, key) in clients.items():
                    other = dealt["south" if name == "north" else "north"]
                    reply = client.request("GET", f"/v1/seats/{key}")
                    hand = reply.json()["observation"]["hand"]
                    assert set(hand) <= set(dealt[name]) and not set(hand) & set(other)
                    # without tokens the id is the owner's handle: a seat never learns it
                    assert sid.encode() not in reply.body
                for name, (client, key) in clients.items():
                    picture = client.request("GET", f"/v1/seats/{key}/render").json()["content"]
                    hand = _view(client, key)["observation"]["hand"]
                    assert picture.startswith(f"{name} holds {hand};")  # its own hand only
                    assert ("south" if name == "north" else "north") not in picture
                picture = watcher.request("GET", f"/v1/seats/{keys['spectate']}/render")
                assert "holds" not in picture.json()["content"]
                client, key = clients[turn]
                hand = _view(client, key)["observation"]["hand"]
                played = _play(client, key, {"card": hand[-1]})
                assert played.status == 200, played
                assert set(played.json()["observation"]["hand"]) <= set(dealt[turn])
            assert _view(north, keys["keys"]["north"])["observation"]["done"]


def test_a_key_acts_as_its_own_holder_never_as_the_owner_whatever_token_it_shows(
    tmp_path: Path,
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("owner-token-0123456789\nplayer-token-0123456789\n")
    with run_server("cards", transport="http", auth=AuthConfig(token_file=str(tokens))) as server:
        as_owner = {"authorization": "Bearer owner-token-0123456789"}
        as_player = {"authorization": "Bearer player-token-0123456789"}
        owner, player = Http(server.port), Http(server.port)
        sid = owner.request("POST", "/v1/sessions", {"env": "cards"}, as_owner).json()["session"]
        keys = owner.request("GET", f"/v1/sessions/{sid}/seats", headers=as_owner).json()
        owner.request("POST", f"/v1/sessions/{sid}/reset", {"seed": 3}, as_owner)
        north, south = keys["keys"]["north"], keys["keys"]["south"]
        assert player.request("GET", f"/v1/seats/{north}").status == 401  # no token
        view = player.request("GET", f"/v1/seats/{north}", headers=as_player)
        assert view.status == 200 and view.json()["seat"] == "north"
        # the owner's token, through a key, is that seat's holder too: no other seat's view
        moves = owner.request("POST", f"/v1/seats/{south}/play", {"action": {"card": 1}}, as_owner)
        _error(moves, 409, "not_your_turn")
        # the player, even told the id, is no owner: its token's requests know no such session
        for path in ("state", "seats"):
            reply = player.request("GET", f"/v1/sessions/{sid}/{path}", headers=as_player)
            _error(reply, 404, "unknown_session")
        peek = {"op": "observe", "id": 1, "session": sid, "seat": "south"}
        _error(player.request("POST", "/v1/frames", peek, as_player), 404, "unknown_session")


def test_a_seat_left_over_http_is_lost_by_the_envs_rule_after_its_lease() -> None:
    with run_server("cards_threaded", transport="http", limits=Limits(lease=1.0)) as server:
        owner, north, south = (Http(server.port) for _ in range(3))
        _, keys = _game(owner, "cards_threaded", seed=4)
        n, s = keys["keys"]["north"], keys["keys"]["south"]
        assert _view(south, s)["seat"] == "south"
        hand = _view(north, n)["observation"]["hand"]
        assert _play(north, n, {"card": hand[0]}).status == 200
        assert south.request("POST", f"/v1/seats/{s}/leave").json() == {"left": True}
        view = _view(north, n, "?wait=1&timeout=10")  # south's turn never comes
        assert view["lost"] == ["south"] and view["turn"] is None
        _error(_play(north, n, {"card": hand[1]}), 409, "episode_done")


def test_a_follower_naming_the_view_it_has_misses_no_move_between_its_requests(
    chess_server: RunningServer,
) -> None:
    owner, white, watcher = (Http(chess_server.port) for _ in range(3))
    _, keys = _game(owner, "chess-duel")
    w, s = keys["keys"]["white"], keys["spectate"]
    seen = watcher.request("GET", f"/v1/seats/{s}")
    again = watcher.request("GET", f"/v1/seats/{s}")
    assert seen.headers["etag"] == again.headers["etag"]  # the same view: the same tag
    assert seen.headers["cache-control"] == "no-store"
    assert _play(white, w, {"move": "e4"}).status == 200  # between the watcher's requests
    # without the tag, a public wait is for the next move: bounded, it answers as it is
    started = time.monotonic()
    late = watcher.request("GET", f"/v1/seats/{s}?wait=1&timeout=0.3")
    assert time.monotonic() - started >= 0.25
    assert late.json()["observation"]["last_move"] == "e2e4"
    # with it, the move it has not seen is answered at once
    started = time.monotonic()
    tagged = {"if-none-match": seen.headers["etag"]}
    caught = watcher.request("GET", f"/v1/seats/{s}?wait=1&timeout=30", headers=tagged)
    assert time.monotonic() - started < 10  # not the 30 s it would wait for a next move
    assert caught.json()["turn"] == "black" and caught.headers["etag"] != seen.headers["etag"]
    # naming the view as it is, it waits (here, past its bound) for the next move
    current = {"if-none-match": caught.headers["etag"]}
    started = time.monotonic()
    same = watcher.request("GET", f"/v1/seats/{s}?wait=1&timeout=0.3", headers=current)
    assert time.monotonic() - started >= 0.25 and same.headers["etag"] == caught.headers["etag"]
    waited: list[Reply] = []
    follower = threading.Thread(
        target=lambda: waited.append(
            Http(chess_server.port).request("GET", f"/v1/seats/{s}?wait=1", headers=current)
        )
    )
    follower.start()
    time.sleep(0.3)
    assert waited == []
    assert _play(Http(chess_server.port), keys["keys"]["black"], {"move": "e5"}).status == 200
    follower.join(timeout=10)
    assert waited and waited[0].json()["observation"]["last_move"] == "e7e5"


def test_a_seat_whose_key_sends_keepalives_is_held_past_its_lease_one_silent_is_not() -> None:
    with run_server("cards", transport="http", limits=Limits(lease=1.0)) as server:
        owner, north, south = (Http(server.port) for _ in range(3))
        _, keys = _game(owner, "cards", seed=2)
        n, s = keys["keys"]["north"], keys["keys"]["south"]
        assert _view(north, n)["turn"] == "north"  # north thinks; neither moves
        assert _view(south, s)["seat"] == "south"
        pinged = []
        with ecotone.Connection.open_url(server.ws_url) as other:
            deadline = time.monotonic() + 3.0  # three leases
            while time.monotonic() < deadline:
                kept = north.request("POST", f"/v1/seats/{n}/keepalive")
                assert kept.status == 200 and "session" not in kept.json()
                pinged.append(kept.json())
                time.sleep(0.25)
            assert pinged[0] == {"seat": "north", "lease": 1.0, "held": True}
            assert all(p["held"] for p in pinged)
            with pytest.raises(ecotone.ServerError) as caught:  # north's key: still held
                other.join(n)
            assert caught.value.code == "seat_taken"
            # south sent nothing for three leases: released, another connection takes it
            assert wait_until(lambda: _joins(other, s))
            _error(south.request("POST", f"/v1/seats/{s}/keepalive"), 409, "seat_taken")
        _error(north.request("POST", "/v1/seats/not-a-key/keepalive"), 404, "unknown_seat_key")
        _error(north.request("GET", "/v1/seats/not-a-key/trajectory"), 404, "unknown_seat_key")


def _joins(connection: ecotone.Connection, key: str) -> bool:
    try:
        connection.join(key)
    except ecotone.ServerError as exc:
        assert exc.code == "seat_taken"
        return False
    return True


def test_a_seats_trajectory_holds_its_own_moves_and_views_never_the_other_hand(
    tmp_path: Path,
) -> None:
    with run_server("cards", transport="http") as server:
        owner, north, south, watcher = (Http(server.port) for _ in range(4))
        sid, keys = _game(owner, "cards", seed=9)
        hands = owner.request("GET", f"/v1/sessions/{sid}/state").json()["state"]["hands"]
        n, s = keys["keys"]["north"], keys["keys"]["south"]
        played: dict[str, list[int]] = {"north": [], "south": []}
        for turn in range(6):
            seat, key, client = ("north", n, north) if turn % 2 == 0 else ("south", s, south)
            card = _view(client, key)["observation"]["hand"][-1]
            assert _play(client, key, {"card": card}).status == 200
            played[seat].append(card)
            if turn == 2:  # so far, mid-game
                middle = north.request("GET", f"/v1/seats/{n}/trajectory")
        got = north.request("GET", f"/v1/seats/{n}/trajectory")
        watched = watcher.request("GET", f"/v1/seats/{keys['spectate']}/trajectory")
    assert got.status == 200 and got.headers["content-type"] == "application/x-ndjson"
    assert got.headers["content-disposition"] == 'attachment; filename="cards-north.jsonl"'
    assert sid.encode() not in got.body and sid.encode() not in watched.body
    lines = [json.loads(line) for line in got.body.decode().splitlines()]
    header, reset, *steps, end = lines
    assert (header["kind"], header["seat"], header["session"]) == ("episode", "north", None)
    assert reset["kind"] == "reset" and reset["observation"]["hand"] == hands["north"]
    assert [step["seat"] for step in steps] == ["north", "south"] * 3
    assert [step["action"]["card"] for step in steps[::2]] == played["north"]
    assert all(step["action"] is None for step in steps[1::2])  # south's moves: not its own
    for line in (reset, *steps):  # its own hand only, ever: none of south's cards in hand
        assert set(line["observation"]["hand"]) <= set(hands["north"])
    assert steps[-1]["observation"]["table"] == [
        list(r) for r in zip(*played.values(), strict=True)
    ]
    assert end == {"kind": "end", "reason": "done", "error": None, "time": end["time"]}
    assert len(middle.body.decode().splitlines()) == 5  # header, reset, three moves
    # ecotone.recording reads it: the seat's moves, its views, whose move each was
    path = tmp_path / "north.jsonl"
    path.write_bytes(got.body)
    episode = ecotone.recording.read_episode(path)
    assert episode.seats == ["north", "south"] * 3 and episode.end == "done"
    assert episode.actions[1] is None and episode.rewards == [s["reward"] for s in steps]
    # the spectator's: the public views, no hand and no move
    public = [json.loads(line) for line in watched.body.decode().splitlines()]
    assert public[0]["seat"] is None and len(public) == len(lines)
    assert all(p["observation"]["hand"] == [] for p in public[1:-1])
    assert all(p.get("action") is None for p in public[2:-1])
