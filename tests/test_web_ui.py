"""The web UI in a real browser: headless Chromium (the system's) driven by Playwright, against
real servers started with `web=True`. Without Playwright or Chromium these tests skip, except
on CI (CI=true), where that is a failure."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import msgspec
import pytest

import ecotone.recording
from tests import browser
from tests.conftest import RunningServer, run_server, wait_until
from tests.web_envs import ViewEnvs

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page

try:
    from playwright.sync_api import expect

    expect.set_options(timeout=10_000)
except ImportError:  # the `context` fixture skips every test (fails them on CI)
    pass


@pytest.fixture(scope="module")
def context(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    """A fresh headless Chromium. Missing Playwright or Chromium: a skip, but a failure on
    CI (CI=true), where the browser tests must run."""
    reason = browser.unavailable()
    if reason is not None:
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"the web UI tests need a browser on CI: {reason}", pytrace=False)
        pytest.skip(reason)
    with browser.chromium(tmp_path_factory.mktemp("chromium-profile")) as context:
        yield context


@attrs.define
class UI:
    """Opens tabs on a server's web UI; records what no test should ever see: script errors
    and requests to anywhere but that server."""

    context: BrowserContext
    pages: list[Page] = attrs.field(factory=list)
    errors: list[str] = attrs.field(factory=list)
    foreign: list[str] = attrs.field(factory=list)

    def open(self, server: RunningServer, path: str = "/web") -> Page:
        """A new tab on the page at `path`, once it is ready (its session opened and reset;
        a seat's page: its seat joined)."""
        page = self.context.new_page()
        self.pages.append(page)
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))

        def outside(request: Any) -> None:
            if not request.url.startswith((server.url + "/", "data:", "blob:")):
                self.foreign.append(request.url)

        page.on("request", outside)
        page.goto(server.url + path)
        page.wait_for_selector("body[data-ready]")
        return page


@pytest.fixture
def ui(context: BrowserContext) -> Iterator[UI]:
    opened = UI(context)
    yield opened
    for page in opened.pages:
        if not page.is_closed():
            page.close()
    assert opened.errors == [], "script errors in the page"
    assert opened.foreign == [], "the page fetched something from elsewhere"


def field(page: Page, path: str) -> Any:
    """The input (or select, textarea) of the form field at a dotted path."""
    return page.locator(f'[data-field="{path}"] > .field-body').locator("input, select, textarea")


def field_error(page: Page, path: str) -> Any:
    return page.locator(f'[data-field="{path}"] > .field-error')


def shown(page: Page, key: str) -> Any:
    """An observation field's value as the page shows it."""
    return page.locator(f'#observation-fields [data-key="{key}"]')


# --- playing -----------------------------------------------------------------------------------


def test_counter_steps_from_the_form_and_shows_observation_reward_and_return(ui: UI) -> None:
    with run_server("counter", web=True) as server:
        page = ui.open(server)
        expect(page.locator("#env-name")).to_have_text("counter")
        expect(shown(page, "count")).to_have_text("0")
        page.get_by_label("delta", exact=True).fill("3")
        page.get_by_role("button", name="Step").click()
        expect(page.locator("#step-count")).to_have_text("1")
        expect(shown(page, "count")).to_have_text("3")
        expect(page.locator("#reward")).to_have_text("3")
        page.get_by_label("delta", exact=True).fill("-1")
        page.keyboard.press("Enter")  # Enter in a field submits, as in any form
        expect(page.locator("#step-count")).to_have_text("2")
        expect(shown(page, "count")).to_have_text("2")
        expect(page.locator("#reward")).to_have_text("-1")
        expect(page.locator("#return")).to_have_text("2")
        expect(page.locator("#done")).to_have_text("false")
        raw = json.loads(page.locator("#observation-raw").text_content() or "")
        assert raw == {"reward": -1, "done": False, "truncated": False, "metadata": {}, "count": 2}
        rows = page.locator("#trajectory tbody tr")
        expect(rows).to_have_count(3)
        expect(rows.nth(2)).to_contain_text('{"delta":-1}')
        expect(page.locator('#state-fields [data-key="count"]')).to_have_text("2")
        assert [obs.count for _, _, _, obs in server.recorder.steps] == [3, 2]


def test_the_end_of_an_episode_is_shown_and_step_waits_for_a_reset(ui: UI) -> None:
    with run_server("counter", web=True) as server:
        page = ui.open(server)
        page.locator("#reset-options-box summary").click()
        page.fill("#reset-options", '{"target": 2}')
        page.get_by_role("button", name="Reset").click()
        page.get_by_label("delta", exact=True).fill("5")
        page.get_by_role("button", name="Step").click()
        expect(page.locator("#done")).to_have_text("true")
        expect(page.locator("#episode-end")).to_contain_text("Episode over (done), return 5")
        expect(page.get_by_role("button", name="Step")).to_be_disabled()
        page.get_by_role("button", name="Reset").click()
        expect(page.get_by_role("button", name="Step")).to_be_enabled()
        expect(page.locator("#return")).to_have_text("0")


@pytest.mark.parametrize(
    ("env", "action"),
    [
        ("counter", {"delta": 1}),
        ("echo", {"message": "hello"}),
        ("gridworld", {"move": "left"}),
        ("wordle", {"guess": "crane"}),
        ("chess", {"move": "e4"}),
        ("coding", {"code": "print(1)"}),
        ("gymnasium:CartPole-v1", {"action": 1}),
    ],
)
def test_every_bundled_env_plays_a_step_from_its_generated_form(
    ui: UI, env: str, action: dict[str, Any]
) -> None:
    if env == "chess":
        pytest.importorskip("chess")
    if env.startswith("gymnasium:"):
        pytest.importorskip("gymnasium")
    with run_server(env, web=True) as server:
        page = ui.open(server)
        expect(page.locator("#env-name")).to_have_text(env)
        browser.step_with(page, action)
        expect(page.locator("#step-count")).to_have_text("1")
        expect(page.locator("#action-error")).to_be_empty()
        assert wait_until(lambda: len(server.recorder.steps) == 1)
        _, _, sent, _ = server.recorder.steps[0]
        assert {name: getattr(sent, name) for name in action} == action


# --- validation ----------------------------------------------------------------------------------


def test_a_non_integer_is_refused_next_to_its_field_before_the_server_sees_it(ui: UI) -> None:
    with run_server("counter", web=True) as server:
        page = ui.open(server)
        page.get_by_label("delta", exact=True).fill("1.5")
        page.get_by_role("button", name="Step").click()
        expect(field_error(page, "delta")).to_have_text("must be an integer")
        expect(page.locator('[data-field="delta"]')).to_have_class("field field-integer invalid")
        page.get_by_label("delta", exact=True).fill("")
        page.get_by_role("button", name="Step").click()
        expect(field_error(page, "delta")).to_have_text("required")
        expect(page.locator("#step-count")).to_have_text("0")
        assert server.recorder.steps == []
        page.get_by_label("delta", exact=True).fill("2")
        page.get_by_role("button", name="Step").click()
        expect(page.locator("#step-count")).to_have_text("1")
        expect(field_error(page, "delta")).to_be_empty()


def test_bounds_from_the_schema_are_checked_in_the_page(ui: UI) -> None:
    pytest.importorskip("gymnasium")
    with run_server("gymnasium:CartPole-v1", web=True) as server:
        page = ui.open(server)
        expect(page.locator('[data-field="action"] .hint')).to_have_text("integer, >= 0, <= 1")
        field(page, "action").fill("2")
        page.get_by_role("button", name="Step").click()
        expect(field_error(page, "action")).to_have_text("must be at most 1")
        field(page, "action").fill("-1")
        page.get_by_role("button", name="Step").click()
        expect(field_error(page, "action")).to_have_text("must be at least 0")
        assert server.recorder.steps == []


def test_an_illegal_chess_move_is_shown_next_to_move_and_the_game_goes_on(ui: UI) -> None:
    pytest.importorskip("chess")
    with run_server("chess", web=True) as server:
        page = ui.open(server)
        browser.step_with(page, {"move": "e2e5"})
        expect(field_error(page, "move")).to_contain_text("'e2e5' is not a legal move here")
        expect(page.locator("#step-count")).to_have_text("0")
        browser.step_with(page, {"move": "e2e4"})
        expect(page.locator("#step-count")).to_have_text("1")
        expect(field_error(page, "move")).to_be_empty()
        expect(shown(page, "agent_move")).to_have_text("e2e4")


def test_an_out_of_range_discrete_sent_as_raw_json_is_refused_by_the_server(ui: UI) -> None:
    pytest.importorskip("gymnasium")
    with run_server("gymnasium:CartPole-v1", web=True) as server:
        page = ui.open(server)
        page.get_by_role("tab", name="Raw JSON").click()
        page.fill("#raw-action", '{"action": 5}')
        page.get_by_role("button", name="Step").click()
        expect(page.locator("#raw-error")).to_have_text("action: Expected `int` <= 1")
        expect(page.locator("#step-count")).to_have_text("0")
        page.fill("#raw-action", '{"action": 1}')
        page.get_by_role("button", name="Step").click()
        expect(page.locator("#step-count")).to_have_text("1")
        expect(page.locator("#raw-error")).to_be_empty()


def test_nested_fields_lists_unions_and_optionals_build_the_action(ui: UI) -> None:
    with run_server("plan", web=True, plugins=[ViewEnvs()]) as server:
        page = ui.open(server)
        expect(page.locator('[data-field="points"] .row')).to_have_count(1)  # minItems
        field(page, "name").fill("route")
        field(page, "points.0.x").fill("1")
        field(page, "points.0.y").fill("12")
        page.get_by_role("button", name="add item to points").click()
        field(page, "points.1.x").fill("5")
        field(page, "points.1.y").fill("5")
        page.get_by_role("button", name="Step").click()
        expect(field_error(page, "points.0.y")).to_have_text("must be at most 9")
        field(page, "points.0.y").fill("2")
        page.get_by_label("shape: which kind").select_option(label="Square")
        field(page, "shape.side").fill("3")
        page.get_by_role("button", name="Step").click()
        # valid to the page; the env refuses it, and its dotted path finds the field
        expect(field_error(page, "points.1.y")).to_have_text("the cell (5, 5) is taken")
        page.locator('[data-field="points.1"] button.remove').click()
        expect(page.get_by_role("button", name="add item to points")).to_be_enabled()
        page.get_by_label("include weights").check()
        page.get_by_role("button", name="add entry to weights").click()
        page.locator('[data-field="weights"] input.key').fill("a")
        page.locator('[data-field="weights"] .row .field-body input').fill("0.5")
        field(page, "style").select_option(label="dashed")
        page.get_by_role("button", name="Step").click()
        expect(page.locator("#step-count")).to_have_text("1")
        _, _, sent, _ = server.recorder.steps[0]
        assert msgspec.to_builtins(sent) == {
            "name": "route",
            "points": [{"x": 1, "y": 2}],
            "shape": {"kind": "square", "side": 3},
            "style": "dashed",
            "closed": False,
            "weights": {"a": 0.5},
            "label": None,
            "metadata": {},
        }
        # the same action in raw JSON, and back to the form unchanged
        page.get_by_role("tab", name="Raw JSON").click()
        raw = json.loads(page.input_value("#raw-action"))
        assert raw == {
            "name": "route",
            "points": [{"x": 1, "y": 2}],
            "shape": {"kind": "square", "side": 3},
            "style": "dashed",
            "weights": {"a": 0.5},
        }
        raw["label"] = {"x": 0, "y": 9}
        raw["points"].append({"x": 4, "y": 4})
        page.fill("#raw-action", json.dumps(raw))
        page.get_by_role("tab", name="Form").click()
        expect(field(page, "points.1.x")).to_have_value("4")
        expect(field(page, "label.y")).to_have_value("9")
        expect(page.get_by_label("include label")).to_be_checked()
        page.get_by_role("tab", name="Raw JSON").click()
        assert json.loads(page.input_value("#raw-action")) == raw
        page.fill("#raw-action", json.dumps({**raw, "label": None}))  # null: its default
        page.get_by_role("tab", name="Form").click()
        expect(page.get_by_label("include label")).not_to_be_checked()
        page.get_by_role("tab", name="Raw JSON").click()
        page.fill("#raw-action", json.dumps({**raw, "colour": "red"}))  # no such field
        page.get_by_role("tab", name="Form").click()
        expect(page.locator("#raw-error")).to_contain_text("the form cannot show all of this")
        expect(page.locator("#raw-action")).to_be_visible()  # still in raw JSON


def test_raw_json_mode_steps_reports_bad_json_and_round_trips_with_the_form(ui: UI) -> None:
    with run_server("counter", web=True) as server:
        page = ui.open(server)
        page.get_by_label("delta", exact=True).fill("4")
        page.get_by_role("tab", name="Raw JSON").click()
        assert json.loads(page.input_value("#raw-action")) == {"delta": 4}
        page.fill("#raw-action", '{"delta": 2, "metadata": {"why": "raw"}}')
        page.get_by_role("button", name="Step").click()
        expect(shown(page, "count")).to_have_text("2")
        page.fill("#raw-action", '{"delta": "two"}')
        page.get_by_role("button", name="Step").click()
        expect(page.locator("#raw-error")).to_have_text("delta: Expected `int`, got `str`")
        page.fill("#raw-action", '{"delta": ')
        page.get_by_role("button", name="Step").click()
        expect(page.locator("#raw-error")).to_contain_text("not valid JSON")
        page.fill("#raw-action", '{"delta": 6, "metadata": {"why": "form"}}')
        page.get_by_role("tab", name="Form").click()
        expect(page.get_by_label("delta", exact=True)).to_have_value("6")
        expect(page.get_by_label("include metadata")).to_be_checked()
        page.get_by_role("button", name="Step").click()
        expect(shown(page, "count")).to_have_text("8")
        _, _, sent, _ = server.recorder.steps[-1]
        assert (sent.delta, sent.metadata) == (6, {"why": "form"})


# --- sessions -----------------------------------------------------------------------------------


def test_two_tabs_play_separate_episodes_and_a_closed_tab_closes_its_session(ui: UI) -> None:
    with run_server("counter", web=True) as server:
        first, second = ui.open(server), ui.open(server)
        sid1 = first.evaluate("document.body.dataset.session")
        sid2 = second.evaluate("document.body.dataset.session")
        assert sid1 != sid2
        first.get_by_label("delta", exact=True).fill("5")
        first.get_by_role("button", name="Step").click()
        expect(shown(first, "count")).to_have_text("5")
        second.get_by_label("delta", exact=True).fill("1")
        second.get_by_role("button", name="Step").click()
        expect(shown(second, "count")).to_have_text("1")
        first.get_by_role("button", name="Step").click()
        expect(shown(first, "count")).to_have_text("10")
        expect(shown(second, "count")).to_have_text("1")
        expect(second.locator("#trajectory tbody tr")).to_have_count(2)
        assert {s for s, _, _, _ in server.recorder.steps} == {sid1, sid2}
        first.close()
        assert wait_until(lambda: server.recorder.close_reason(sid1) == "client")
        assert server.recorder.open_sessions == {sid2}
        second.get_by_role("button", name="Step").click()  # the other tab plays on
        expect(shown(second, "count")).to_have_text("2")


def test_reset_with_a_seed_and_options_replays_the_same_layout(ui: UI) -> None:
    with run_server("gridworld", web=True) as server:
        page = ui.open(server)
        page.fill("#reset-seed", "7")
        page.get_by_role("button", name="Reset").click()
        expect(page.locator("#status")).to_have_text("reset with seed 7")
        expect(page.locator('#state-fields [data-key="seed"]')).to_have_text("7")
        grid = shown(page, "grid").text_content()
        browser.step_with(page, {"move": "up"})
        expect(page.locator("#step-count")).to_have_text("1")
        page.get_by_role("button", name="Reset").click()
        expect(page.locator("#step-count")).to_have_text("0")
        expect(shown(page, "grid")).to_have_text(grid or "")
        page.locator("#reset-options-box summary").click()
        page.fill("#reset-options", '{"size": 4}')
        page.get_by_role("button", name="Reset").click()
        expect(page.locator('#state-fields [data-key="max_steps"]')).to_have_text("64")
        assert len((shown(page, "grid").text_content() or "").splitlines()) == 4  # 4 x 4
        page.fill("#reset-options", '{"colour": 4}')
        page.get_by_role("button", name="Reset").click()
        expect(page.locator("#reset-error")).to_contain_text(
            "invalid_argument: env 'gridworld' does not take reset option(s) colour"
        )
        page.fill("#reset-options", "{size")
        page.get_by_role("button", name="Reset").click()
        expect(page.locator("#reset-error")).to_contain_text("not valid JSON")
        page.fill("#reset-options", "{}")
        page.fill("#reset-seed", "1.5")
        page.get_by_role("button", name="Reset").click()
        expect(page.locator("#reset-error")).to_have_text("the seed must be an integer")


def test_the_trajectory_downloads_as_json_lines_ecotone_recording_reads(
    ui: UI, tmp_path: Path
) -> None:
    with run_server("counter", web=True) as server:
        page = ui.open(server)
        page.fill("#reset-seed", "11")
        page.get_by_role("button", name="Reset").click()
        expect(page.locator("#status")).to_have_text("reset with seed 11")
        for i, delta in enumerate((2, 3), start=1):
            page.get_by_label("delta", exact=True).fill(str(delta))
            page.get_by_role("button", name="Step").click()
            expect(page.locator("#step-count")).to_have_text(str(i))
        with page.expect_download() as info:
            page.get_by_role("button", name="Download JSON Lines").click()
        download = info.value
        assert download.suggested_filename.startswith("counter-")
        assert download.suggested_filename.endswith(".jsonl")
        path = tmp_path / "episode.jsonl"
        download.save_as(path)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["kind"] for line in lines] == ["episode", "reset", "step", "step"]
    header, reset, *steps = lines
    assert (header["env"], header["seed"], header["source"]) == ("counter", 11, "web")
    assert reset["observation"]["count"] == 0
    assert [s["action"] for s in steps] == [{"delta": 2}, {"delta": 3}]
    assert [s["observation"]["count"] for s in steps] == [2, 5]
    assert [s["reward"] for s in steps] == [2, 3]
    episode = ecotone.recording.read_episode(path)
    assert (episode.length, episode.total_reward, episode.seed) == (2, 5.0, 11)
    assert episode.episode_id is not None and len(episode.episode_id) == 32


# --- what the page shows about the env --------------------------------------------------------


def test_metadata_readme_and_the_three_schemas_are_shown(ui: UI) -> None:
    with run_server("gridworld", web=True) as server:
        page = ui.open(server)
        expect(page.locator("#env-name")).to_have_text("gridworld")
        expect(page.locator("#env-version")).to_have_text("v1")
        expect(page.locator("#env-description")).to_have_text(
            "Walk a seeded grid to the goal around walls and pits."
        )
        expect(page).to_have_title("gridworld · ecotone")
        readme = page.locator("#readme")
        expect(readme).to_be_hidden()  # collapsed until asked for
        page.locator("#readme-box summary").click()
        expect(readme).to_contain_text("Reset options: `size`")
        with ecotone.connect(server.ws_url) as env:
            info = env.describe()
        for which, schema in (
            ("action", info.action_schema),
            ("observation", info.observation_schema),
            ("state", info.state_schema),
        ):
            pre = page.locator(f"#{which}-schema")
            expect(pre).to_be_hidden()
            page.locator(f"#{which}-schema-box summary").click()
            expect(pre).to_be_visible()
            assert json.loads(pre.text_content() or "") == schema


def test_gridworld_shows_its_own_view_beside_the_observation(ui: UI) -> None:
    with run_server("gridworld", web=True) as server:
        page = ui.open(server)
        page.locator("#reset-options-box summary").click()
        page.fill("#reset-options", '{"layout": ["S..", "...", "..G"]}')
        page.get_by_role("button", name="Reset").click()
        view = page.locator("#render-view")
        expect(page.locator("#render-panel")).to_be_visible()
        expect(view).to_have_attribute("data-kind", "text")
        expect(view).to_contain_text("A..\n...\n..G")
        expect(view).to_contain_text("A agent, G goal")
        browser.step_with(page, {"move": "down"})
        expect(view).to_contain_text("...\nA..\n..G")
        expect(view).to_contain_text("step 1 of 36")


def test_an_env_without_a_view_shows_no_view_panel(ui: UI) -> None:
    with run_server("counter", web=True) as server:
        page = ui.open(server)
        expect(page.locator("#render-panel")).to_be_hidden()


def test_markdown_image_and_html_views_are_shown_safely(ui: UI) -> None:
    with run_server("markdown_view", web=True, plugins=[ViewEnvs()]) as server:
        page = ui.open(server)
        expect(page.locator("#render-view h4")).to_have_text("Count")
        expect(page.locator("#render-view strong")).to_have_text("0")
    with run_server("picture_view", web=True, plugins=[ViewEnvs()]) as server:
        page = ui.open(server)
        image = page.locator("#render-view img")
        expect(image).to_have_attribute("src", re.compile(r"^data:image/png;base64,"))
        page.wait_for_function("document.querySelector('#render-view img').complete")
        assert image.evaluate("img => [img.naturalWidth, img.naturalHeight]") == [2, 2]
    with run_server("html_view", web=True, plugins=[ViewEnvs()]) as server:
        page = ui.open(server)
        frame = page.locator("#render-view iframe")
        expect(frame).to_have_attribute("sandbox", "")
        expect(page.frame_locator("#render-view iframe").locator("#count")).to_have_text("0")


# --- the screenshot for the README -------------------------------------------------------------


def test_the_screenshot_script_draws_a_played_episode(
    context: BrowserContext, tmp_path: Path
) -> None:
    target = tmp_path / "web-ui.png"
    browser.take_screenshot(target, context)
    data = target.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width == 1280 and height > 900


def test_the_server_panel_shows_what_metrics_says_live(ui: UI) -> None:
    with run_server("counter", web=True) as server:
        page = ui.open(server)
        for delta in ("1", "2"):
            page.get_by_label("delta", exact=True).fill(delta)
            page.get_by_role("button", name="Step").click()
        expect(page.locator("#step-count")).to_have_text("2")
        page.get_by_label("delta", exact=True).fill("1.5")  # refused in the page: no request
        metric = page.locator("#server-metrics")
        expect(metric.locator('[data-metric="ecotone_steps_total"]')).to_have_text(
            "2", timeout=6000
        )
        expect(metric.locator('[data-metric="ecotone_sessions_open"]')).to_have_text("1")
        expect(metric).to_contain_text("sessions opened")


def test_the_task_picker_starts_the_chosen_task(ui: UI) -> None:
    from ecotone.plugins.wordle import task_set

    tasks = task_set()
    with run_server("wordle", web=True) as server:
        page = ui.open(server)
        expect(page.locator("#task-picker")).to_be_visible()
        page.select_option("#reset-split", "test")
        ref, record = tasks.get("test", 3)  # the server's own tasks: the word is known here
        expect(page.locator("#reset-task option").nth(4)).to_have_text(f"3: {ref.id}")
        page.select_option("#reset-task", "3")
        page.get_by_role("button", name="Reset").click()
        expect(page.locator("#status")).to_have_text(f"reset (task {ref.id}, test[3])")
        browser.step_with(page, {"guess": record.secret})
        expect(shown(page, "solved")).to_have_text("true")
        page.select_option("#reset-task", "")  # drawn with the seed, from the split
        page.fill("#reset-seed", "2")
        page.get_by_role("button", name="Reset").click()
        expect(page.locator("#status")).to_contain_text("reset with seed 2 (task w-")
        expect(page.locator("#status")).to_contain_text(", test[")
    with run_server("coding", web=True) as server:  # public fields are listed beside the id
        page = ui.open(server)
        page.select_option("#reset-split", "test")
        first = page.locator("#reset-task option").nth(1)
        expect(first).to_contain_text('0: to_roman {"prompt":"')
        expect(first).not_to_contain_text('"id"')
    with run_server("counter", web=True) as server:
        page = ui.open(server)
        expect(page.locator("#task-picker")).to_be_hidden()


# The page's text and every attribute and form value, as a player could read them (hidden
# elements and collapsed panels included).
PAGE_TEXT = """() => {
  const parts = [document.title, document.documentElement.textContent];
  for (const node of document.querySelectorAll("*")) {
    for (const attribute of node.attributes) parts.push(attribute.value);
    if ("value" in node && typeof node.value === "string") parts.push(node.value);
  }
  return parts.join(" ");
}"""


def _says(text: str, word: str) -> bool:
    return re.search(rf"(?<![a-z]){word}(?![a-z])", text, re.IGNORECASE) is not None


def _count(text: str, word: str) -> int:
    return len(re.findall(rf"(?<![a-z]){word}(?![a-z])", text, re.IGNORECASE))


def _static_text(page_before: str, secret: str, guess: str) -> str:
    """What the page shows whatever the episode's word: the page before any reset, and the
    board's own text (its rules, the guess) for another word: a secret that is an everyday
    word (`which`, `right`) is found there as often, and is no leak."""
    from ecotone.plugins.wordle import WordleAction, WordleEnv

    other = "crane" if secret != "crane" else "slate"
    env = WordleEnv()
    env.reset(task=other if other != guess else "pious", allow_any_word=True)
    return page_before + "\n" + env.step(WordleAction(guess=guess)).text


def test_a_wordle_reset_shows_its_secret_nowhere_on_the_page(ui: UI) -> None:
    """Whichever way the episode is chosen (the page's first reset, drawn at random; a seed; a
    task from the picker), the page shows its task's id and never its word, until the episode
    is over. The word is read on the server's side: the task the server chose, in its own
    tasks; a guess of it solving the game proves it was the episode's."""
    from ecotone.plugins.wordle import task_set

    tasks = task_set()

    def episode_secret(page: Page) -> str:
        status = page.locator("#status").text_content() or ""
        found = re.search(r"\(task (\S+), (\w+)\[(\d+)\]\)", status)
        assert found is not None, status
        ref, record = tasks.get(found[2], int(found[3]))
        assert ref.id == found[1]
        return str(record.secret)

    with run_server("wordle", web=True) as server:
        page = ui.open(server)
        before = page.evaluate(PAGE_TEXT)
        picked = tasks.get("test", 5)[0].id
        for seed, split, index in [("", "train", ""), ("7", "train", ""), ("", "test", "5")]:
            page.fill("#reset-seed", seed)
            page.select_option("#reset-split", split)
            if index:  # the split's tasks listed, then one picked
                expect(page.locator("#reset-task option").nth(6)).to_contain_text(f"5: {picked}")
            page.select_option("#reset-task", index)
            page.get_by_role("button", name="Reset").click()
            expect(page.locator("#status")).to_contain_text(f", {split}[")
            expect(page.locator("#state-fields [data-key='step_count']")).to_have_text("0")
            secret = episode_secret(page)
            guess = "slate" if secret != "slate" else "crane"
            browser.step_with(page, {"guess": guess})
            expect(page.locator("#step-count")).to_have_text("1")
            text = page.evaluate(PAGE_TEXT)
            assert "Wordle: find the secret" in text  # the page's text was read
            static = _static_text(before, secret, guess)
            shown_more = _count(text, secret) > _count(static, secret)
            assert not shown_more, f"the page shows the secret {secret!r}"
            browser.step_with(page, {"guess": secret})  # it was the episode's word
            expect(shown(page, "solved")).to_have_text("true")
            assert _says(page.evaluate(PAGE_TEXT), secret)  # told once the episode is over
