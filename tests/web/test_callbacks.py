"""The completion callback on the batch page (docs/operator-page.md): the deliveries table and
the Redeliver button read the polled status document."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from batchcrop.app import App
from tests.api.live import running
from tests.receiver import SECRET, receiving
from tests.web.conftest import TOKEN, submit
from tests.web.test_pages import open_with_token

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def test_a_delivered_callback_is_listed_and_can_be_redelivered(
    page: Any, make_app: Callable[..., App], sources: list[str]
) -> None:
    """A cancelled batch's callback, delivered: the page lists the delivery and enables
    Redeliver; redelivering adds a second delivery of the same callback."""
    app = make_app(callback_secret=SECRET, callback_hosts=("127.0.0.1:*",))
    with receiving() as receiver, running(app, token=TOKEN) as live:
        batch = submit(live, sources[:1], callback_url=receiver.url)
        live.client.post(f"/v1/batches/{batch['id']}/cancel")
        deliverer = app.deliverer("test-deliverer")
        assert deliverer is not None
        assert deliverer.deliver_due() == 1
        open_with_token(page, f"{live.url}/batches/{batch['id']}")
        rows = page.locator("#deliveries tbody tr")
        rows.first.wait_for()
        assert rows.count() == 1
        button = page.locator("#redeliver")
        assert button.is_enabled()
        page.once("dialog", lambda dialog: dialog.accept())
        button.click()
        page.locator("#deliveries tbody tr").nth(1).wait_for()
        assert button.is_disabled()  # the new delivery is under way
    deliveries = app.batches.status(batch["id"])["deliveries"]
    assert len({d["notification_id"] for d in deliveries}) == 1
