"""Where the page keeps the API token, in headless Chromium: by default in sessionStorage, so
this tab and the tabs opened from its links (Ctrl-click, middle-click, window.open) have it and
other tabs do not; with "Remember on this browser" also in localStorage, for every tab of the
browser; "Forget token" clears both."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.web.conftest import TOKEN, ProcessedBatch

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

STORED = (
    "() => [sessionStorage.getItem('batchcrop.apiToken'),"
    " localStorage.getItem('batchcrop.apiToken')]"
)


def give_token(page: Any, *, remember: bool) -> None:
    """Fill the token form, tick "Remember on this browser" or not, and submit."""
    page.get_by_label("API token").fill(TOKEN)
    page.get_by_label("Remember on this browser").set_checked(remember)
    page.get_by_role("button", name="Use token").click()
    page.locator("#content").wait_for(state="visible")


def shows_data(tab: Any) -> bool:
    """True when the tab shows the batch's data; False when it asks for the token instead."""
    tab.wait_for_load_state()
    tab.locator("#content:visible, #token-form:visible").first.wait_for()
    return bool(tab.locator("#content").is_visible())


def opened(page: Any, action: Callable[[], None]) -> Any:
    """The tab that `action` opens from `page`."""
    with page.context.expect_page() as info:
        action()
    return info.value


def test_the_token_follows_tabs_opened_from_the_page_but_no_others(
    page: Any, processed: ProcessedBatch
) -> None:
    """Given without "remember", the token is in sessionStorage only; tabs opened by
    Ctrl-click, middle-click and window.open show the data at once (Chromium copied the
    storage), with no opener left; a tab opened separately in the same browser asks for it."""
    page.goto(processed.live.url + "/")
    give_token(page, remember=False)
    assert page.evaluate(STORED) == [TOKEN, None]
    link = page.locator(f"tr[data-batch-id='{processed.id}'] a").first
    for action in (
        lambda: link.click(modifiers=["Control"]),
        lambda: link.click(button="middle"),
        lambda: page.evaluate("url => { window.open(url); }", f"/batches/{processed.id}"),
    ):
        tab = opened(page, action)
        assert shows_data(tab)
        tab.locator("#sheet li.card").first.wait_for()
        assert tab.evaluate(STORED) == [TOKEN, None]
        assert tab.evaluate("window.opener") is None
        tab.close()
    assert len(page.context.pages) == 1  # each click opened one tab, not two
    separate = page.context.new_page()
    separate.goto(f"{processed.live.url}/batches/{processed.id}")
    assert not shows_data(separate)
    assert separate.evaluate(STORED) == [None, None]
    assert not separate.get_by_label("Remember on this browser").is_checked()


def test_a_remembered_token_serves_every_tab_until_forgotten(
    page: Any, processed: ProcessedBatch
) -> None:
    """Ticking "Remember on this browser" keeps the token in localStorage: a tab opened
    separately, and a reloaded one, show the data without asking. "Forget token" in one tab
    clears both storages: the other tab asks again on its next load."""
    page.goto(processed.live.url + "/")
    give_token(page, remember=True)
    assert page.evaluate(STORED) == [TOKEN, TOKEN]
    other = page.context.new_page()
    other.goto(f"{processed.live.url}/batches/{processed.id}")
    assert shows_data(other)
    assert other.evaluate(STORED) == [None, TOKEN]
    page.get_by_role("button", name="Forget token").click()
    page.get_by_label("API token").wait_for(state="visible")
    assert page.evaluate(STORED) == [None, None]
    other.reload()
    assert not shows_data(other)
    other.close()


def test_a_token_given_without_remember_replaces_a_remembered_one(
    page: Any, processed: ProcessedBatch
) -> None:
    """Choosing not to remember a token given later removes the remembered one: the browser
    keeps no token once the tab closes."""
    page.goto(processed.live.url + "/")
    page.evaluate("t => localStorage.setItem('batchcrop.apiToken', t)", "an-old-token")
    page.reload()
    page.get_by_text("The API token was not accepted").wait_for()
    assert page.get_by_label("Remember on this browser").is_checked()
    give_token(page, remember=False)
    assert page.evaluate(STORED) == [TOKEN, None]
