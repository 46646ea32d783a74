"""Completion callbacks (docs/design.md §7, callbacks; ADR 0013) on SQLite and PostgreSQL,
against a receiver on loopback that checks signatures and deduplicates."""

from __future__ import annotations

import logging
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from batchcrop.app import App
from batchcrop.batches.errors import NoSuchBatch, NothingToRedeliver
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.callbacks.delivery import CallbackUrlError, check_callback_url, signature, verify
from batchcrop.callbacks.hosts import address_refusal, destination_refusal
from batchcrop.cli.main import main
from batchcrop.crop import RenderSpec
from batchcrop.db.queries import IN_LIST_IDS_MAX
from storage import LocalStore
from tests.app_fixtures import run_batch
from tests.cli.test_cli import Cli, _submit, cli, inspect, wait_for
from tests.images import write_photos
from tests.receiver import SECRET, Receiver, answering, receiving, trickling

__all__ = ["cli", "inspect"]  # fixtures

FAST_RETRY_SECONDS = 0.05


@pytest.fixture
def calling_back(make_app: Callable[..., App]) -> App:
    """An app that may call loopback, with the test secret and near-zero retry backoff: its
    deliverer is driven pass by pass by the tests."""
    return make_app(
        callback_secret=SECRET,
        callback_hosts=("127.0.0.1:*",),
        callback_retry_seconds=FAST_RETRY_SECONDS,
    )


@pytest.fixture
def processing(make_app: Callable[..., App]) -> App:
    """An app whose workers process images but deliver nothing (no secret)."""
    return make_app(callback_hosts=("127.0.0.1:*",))


def _request(sources: list[Path], callback_url: str | None) -> BatchRequest:
    return BatchRequest(
        items=tuple(ItemRequest(source=str(s)) for s in sources),
        spec=RenderSpec.from_input({"ratios": "1:1", "max_side": 64}),
        deadline_seconds=3600,
        max_attempts=1,
        callback_url=callback_url,
    )


def _deliver_until(app: App, receiver: Receiver, processed: int, timeout: float = 1.0) -> None:
    """Run a deliverer pass by pass (as a worker's thread would) until `processed`."""
    deliverer = app.deliverer("test-deliverer")
    assert deliverer is not None
    deliverer.client.timeout = httpx.Timeout(timeout)
    deadline = time.monotonic() + 60
    while len(receiver.processed) < processed:
        assert time.monotonic() < deadline, receiver.requests
        if not deliverer.deliver_due():
            time.sleep(FAST_RETRY_SECONDS)


def test_a_flaky_receiver_gets_the_signed_status_once(
    calling_back: App, processing: App, tmp_path: Path
) -> None:
    """503, 500, a timeout, then 204: four attempts, each signed with the same
    Idempotency-Key; the receiver processes one final status document; each attempt is in
    the batch's events and the status document; the responses are nowhere."""
    app = calling_back
    sources = write_photos(tmp_path / "src", 2)
    with receiving(["fail", 500, "hang"], hang_seconds=2.0) as receiver:
        status, _ = app.batches.submit(_request(sources, receiver.url))
        assert status["callback_url"] == receiver.url == status["notify_url"]
        final = run_batch(processing, LocalStore(tmp_path / "store"), status["id"])
        assert final["state"] == "succeeded"
        _deliver_until(app, receiver, 1, timeout=0.5)
        time.sleep(2.0)  # the hung request's handler finishes
    assert [r.signed for r in receiver.requests] == [True] * 4
    assert len({r.key for r in receiver.requests}) == 1
    assert [r.attempt for r in receiver.requests] == ["1", "2", "3", "4"]
    (body,) = receiver.processed.values()
    assert (body["id"], body["state"], body["counts"]["succeeded"]) == (
        status["id"],
        "succeeded",
        2,
    )
    assert body["terminal_reason"] == "All 2 items succeeded."
    document = app.batches.status(status["id"])
    (delivery,) = document["deliveries"]
    assert delivery["notification_id"] == receiver.requests[0].key
    assert (delivery["state"], delivery["attempts"], delivery["reason"]) == ("succeeded", 4, None)
    events, _ = app.batches.events(status["id"], limit=1000)
    deliveries = [e for e in events if e["kind"] == "delivery"]
    assert [(e["to_state"], e["reason"]) for e in deliveries] == [
        ("in_progress", None),
        ("retryable", "http_503"),
        ("in_progress", None),
        ("retryable", "http_500"),
        ("in_progress", None),
        ("retryable", "timeout"),
        ("in_progress", None),
        ("succeeded", None),
    ]
    assert {e["batch_id"] for e in events} == {status["id"]}
    assert "not for echoes" not in str(document) + str(events)


def test_the_notification_is_written_with_the_last_commit(
    calling_back: App, processing: App, tmp_path: Path
) -> None:
    """No deliverer runs: the outbox row is there as soon as the batch is terminal, with the
    status document of that moment; a batch without a callback_url has none."""
    sources = write_photos(tmp_path / "src", 1)
    plain, _ = calling_back.batches.submit(_request(sources, None))
    status, _ = calling_back.batches.submit(_request(sources, "http://127.0.0.1:9/x"))
    store = LocalStore(tmp_path / "store")
    for batch in (plain, status):
        run_batch(processing, store, batch["id"])
    assert calling_back.batches.status(plain["id"])["deliveries"] == []
    (delivery,) = calling_back.batches.status(status["id"])["deliveries"]
    assert (delivery["state"], delivery["attempts"]) == ("queued", 0)
    with pytest.raises(NothingToRedeliver):
        calling_back.batches.redeliver(plain["id"])
    with pytest.raises(NothingToRedeliver):
        calling_back.batches.redeliver(status["id"])  # still under way


def test_a_requeued_batch_notifies_again_with_a_new_id_and_redeliver_repeats_one(
    calling_back: App, processing: App, tmp_path: Path
) -> None:
    """A failed batch notifies; requeued, it ends again and a second notification (a new
    Idempotency-Key) follows. A redelivery repeats the latest one (same key): the receiver
    drops it as a duplicate."""
    app = calling_back
    missing = tmp_path / "src" / "gone.jpg"
    with receiving() as receiver:
        status, _ = app.batches.submit(_request([missing], receiver.url))
        store = LocalStore(tmp_path / "store")
        assert run_batch(processing, store, status["id"])["state"] == "failed"
        _deliver_until(app, receiver, 1)
        app.batches.requeue(status["id"])
        assert run_batch(processing, store, status["id"])["state"] == "failed"
        _deliver_until(app, receiver, 2)
        assert [b["state"] for b in receiver.processed.values()] == ["failed", "failed"]
        app.batches.redeliver(status["id"])
        deadline = time.monotonic() + 30
        deliverer = app.deliverer("test-deliverer")
        assert deliverer is not None
        while len(receiver.requests) < 3:
            assert time.monotonic() < deadline
            deliverer.deliver_due()
            time.sleep(0.05)
    keys = [r.key for r in receiver.requests]
    assert keys[2] == keys[1] != keys[0]
    assert receiver.duplicates == 1
    deliveries = app.batches.status(status["id"])["deliveries"]
    assert [d["state"] for d in deliveries] == ["succeeded"] * 3
    assert deliveries[2]["notification_id"] == deliveries[1]["notification_id"]


def test_redirects_are_not_followed(calling_back: App, processing: App, tmp_path: Path) -> None:
    """A 302 fails the delivery at once (`http_302`; asking again cannot succeed), its
    Location never requested."""
    app = calling_back
    sources = write_photos(tmp_path / "src", 1)
    with receiving(["redirect"]) as receiver:
        status, _ = app.batches.submit(_request(sources, receiver.url))
        run_batch(processing, LocalStore(tmp_path / "store"), status["id"])
        deliverer = app.deliverer("test-deliverer")
        assert deliverer is not None
        assert deliverer.deliver_due() == 1
        time.sleep(FAST_RETRY_SECONDS * 2)
        assert deliverer.deliver_due() == 0
    assert [r.answer for r in receiver.requests] == ["redirect"]
    (delivery,) = app.batches.status(status["id"])["deliveries"]
    assert (
        delivery["state"],
        delivery["reason"],
        delivery["attempts"],
    ) == ("failed", "http_302", 1)


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(b"\x00\xffgarbage\r\n\r\n", id="garbage"),
        pytest.param(b"<html>ok</html>", id="http-0.9"),
        pytest.param(b"HTTP/1.1 200 OK\r\n" + b"X-Endless: a\r\n" * 4000, id="endless-headers"),
    ],
)
def test_a_receiver_answering_something_not_http_is_a_protocol_error(
    calling_back: App, tmp_path: Path, answer: bytes
) -> None:
    """Garbage, an HTTP/0.9 body or headers that never end are a retryable `protocol_error`,
    not a `connect_error` (the connection was made)."""
    with answering(answer) as url:
        status, _ = calling_back.batches.submit(_request(write_photos(tmp_path / "src", 1), url))
        calling_back.batches.cancel(status["id"])
        deliverer = calling_back.deliverer("test-deliverer")
        assert deliverer is not None
        assert deliverer.deliver_due() == 1
    (delivery,) = calling_back.batches.status(status["id"])["deliveries"]
    assert (delivery["state"], delivery["reason"]) == ("retryable", "protocol_error")


def test_a_host_another_process_allows_is_retried_not_failed(
    make_app: Callable[..., App],
    calling_back: App,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A deliverer whose BATCHCROP_CALLBACK_HOSTS lacks the host the submitter allowed retries
    the delivery (`host_not_allowed`, logged once per host) instead of failing it; a deliverer
    configured like the submitter then delivers it."""
    sources = write_photos(tmp_path / "src", 1)
    strict = make_app(
        callback_secret=SECRET,
        callback_hosts=("hooks.example.com",),
        callback_retry_seconds=FAST_RETRY_SECONDS,
    )
    with receiving() as receiver:
        batches = [
            calling_back.batches.submit(_request(sources, receiver.url))[0] for _ in range(2)
        ]
        for batch in batches:
            calling_back.batches.cancel(batch["id"])
        deliverer = strict.deliverer("strict")
        assert deliverer is not None
        with caplog.at_level(logging.INFO, logger="batchcrop"):
            assert deliverer.deliver_due() == 2
        refused = [r for r in caplog.records if "delivery_refused_here" in r.getMessage()]
        assert len(refused) == 1
        for batch in batches:
            (delivery,) = calling_back.batches.status(batch["id"])["deliveries"]
            assert (delivery["state"], delivery["reason"]) == ("retryable", "host_not_allowed")
        time.sleep(FAST_RETRY_SECONDS * 2)
        _deliver_until(calling_back, receiver, 2)
    for batch in batches:
        (delivery,) = calling_back.batches.status(batch["id"])["deliveries"]
        assert delivery["state"] == "succeeded"


def test_submission_refuses_urls_outside_the_allowlist(calling_back: App, tmp_path: Path) -> None:
    sources = write_photos(tmp_path / "src", 1)
    for url in (
        "http://10.0.0.1/x",
        "ftp://127.0.0.1/x",
        "http://user:pw@127.0.0.1/x",
        "http://127.0.0.1/ x",
        "/relative",
    ):
        with pytest.raises(CallbackUrlError):
            calling_back.batches.submit(_request(sources, url))


@pytest.mark.parametrize(
    ("url", "hosts", "refusal"),
    [
        ("https://a.hooks.example.com/x", ("*.example.com",), None),
        ("https://example.com/x", ("*.example.com",), "host_not_allowed"),
        ("https://evil-example.com/x", ("*.example.com",), "host_not_allowed"),
        ("http://127.0.0.1/x", (), "host_not_allowed"),
        ("https://xn--bcher-kva.example/x", ("bücher.example",), None),
        # Without a port an entry allows the scheme's default port only.
        ("http://hooks.example.com/x", ("hooks.example.com",), None),
        ("https://hooks.example.com:443/x", ("hooks.example.com",), None),
        ("http://hooks.example.com:8080/x", ("hooks.example.com",), "port_not_allowed"),
        ("https://hooks.example.com:80/x", ("hooks.example.com",), "port_not_allowed"),
        ("http://hooks.example.com:8080/x", ("hooks.example.com:8080",), None),
        ("http://hooks.example.com:8081/x", ("hooks.example.com:8080",), "port_not_allowed"),
        ("http://a.example.com:9/x", ("*.example.com:*",), None),
        ("http://[::1]:8080/x", ("::1",), "port_not_allowed"),
        ("http://[::1]:8080/x", ("[::1]:8080",), None),
        ("http://[0:0::1]:8080/x", ("[::1]:*",), None),
    ],
)
def test_the_allowlist_names_hosts_and_ports(
    url: str, hosts: tuple[str, ...], refusal: str | None
) -> None:
    """Each entry allows its host (or names below a wildcard) on the scheme's default port,
    or on the port it names; the refusal says which part failed."""
    assert destination_refusal(httpx.URL(url), hosts) == refusal
    if refusal is None:
        assert check_callback_url(url, hosts) == url
    else:
        with pytest.raises(CallbackUrlError, match=refusal.split("_")[0]):
            check_callback_url(url, hosts)


def test_the_signature_scheme() -> None:
    assert check_callback_url("https://HOOKS.example.com/a?b=c", ("hooks.example.com",))
    body = b'{"id":"x"}'
    now = int(time.time())
    header = signature(SECRET, body, now)
    # Stripe's documented construction: HMAC-SHA256 over "t.body", hex, in v1.
    import hashlib  # noqa: PLC0415
    import hmac  # noqa: PLC0415

    expected = hmac.new(SECRET.encode(), f"{now}.".encode() + body, hashlib.sha256).hexdigest()
    assert header == f"t={now},v1={expected}"
    assert verify(SECRET, body, header)
    assert not verify(SECRET, body + b" ", header)
    assert not verify("another-secret-0123456789", body, header)
    assert not verify(SECRET, body, signature(SECRET, body, now - 3600))


@pytest.mark.slow
def test_a_worker_killed_right_after_the_last_commit_still_notifies_once(
    cli: Cli, inspect: App, tmp_path: Path
) -> None:
    """Real `batchcrop worker` processes: the one that commits the batch's last item is
    SIGKILLed the moment the batch is terminal; the outbox row is already there, and another
    worker delivers it: the deduplicating receiver processes the notification exactly once.
    The victim has no callback secret, so it cannot deliver first (on PostgreSQL a deliverer
    is woken by the outbox's commit, well before any kill)."""
    write_photos(tmp_path / "src", 2)
    with receiving() as receiver:
        cli.env.update(
            BATCHCROP_CALLBACK_SECRET=SECRET,
            BATCHCROP_CALLBACK_HOSTS="127.0.0.1:*",
            BATCHCROP_WORKER_TIMEOUT_SECONDS="3",
        )
        batch = _submit(cli, tmp_path / "src", "--callback-url", receiver.url)
        del cli.env["BATCHCROP_CALLBACK_SECRET"]
        victim = cli.spawn("worker", "--concurrency", "1")
        wait_for(
            lambda: inspect.batches.status(batch)["state"] == "succeeded", "the last commit", 120
        )
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        (written,) = inspect.batches.status(batch)["deliveries"]
        cli.env["BATCHCROP_CALLBACK_SECRET"] = SECRET
        survivor = cli.spawn("worker", "--concurrency", "1")
        try:
            receiver.wait_processed(1, timeout=60)
            time.sleep(3.0)  # anything more would arrive now
        finally:
            survivor.send_signal(signal.SIGTERM)
            assert survivor.wait(30) == 0
    assert len(receiver.processed) == 1
    assert all(r.signed for r in receiver.requests)
    assert {r.key for r in receiver.requests} == {written["notification_id"]}
    (delivery,) = inspect.batches.status(batch)["deliveries"]
    assert delivery["state"] == "succeeded"
    events, _ = inspect.batches.events(batch, limit=1000)
    deliverers = {
        e["worker_id"] for e in events if e["kind"] == "delivery" and e["to_state"] == "succeeded"
    }
    print(f"delivery written as {written['state']} at the kill; delivered by {deliverers}")
    assert all(f":{survivor.pid}:" in w for w in deliverers if w)


@pytest.mark.parametrize("left", ["delivery groups", "outbox rows"])
def test_a_later_prune_finishes_one_interrupted_between_outbox_and_delivery_groups(
    calling_back: App, processing: App, tmp_path: Path, left: str
) -> None:
    """A prune stopped after the batch row and before the last of its deliveries' rows (either
    the outbox rows or their lease groups still there) is finished by the next one: nothing of
    the batch or its delivery is left."""
    app = calling_back
    with receiving() as receiver:
        status, _ = app.batches.submit(_request(write_photos(tmp_path / "src", 1), receiver.url))
        assert run_batch(processing, LocalStore(tmp_path / "store"), status["id"])["state"] == (
            "succeeded"
        )
        (delivery,) = app.batches.status(status["id"])["deliveries"]
        _deliver_until(app, receiver, 1)
    with app.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM batchcrop_batches WHERE id = :b"), {"b": status["id"]})
        if left == "delivery groups":
            conn.execute(
                sa.text("DELETE FROM batchcrop_deliveries WHERE batch_id = :b"),
                {"b": status["id"]},
            )
    if left == "outbox rows":
        app.leases.purge(delivery["id"])
    time.sleep(0.01)
    assert app.batches.prune(0.001).batches >= 1
    with app.engine.connect() as conn:
        for table, column in (
            ("batchcrop_deliveries", "batch_id"),
            ("lease_groups", "id"),
            ("lease_items", "group_id"),
        ):
            count = conn.execute(
                sa.text(f"SELECT count(*) FROM {table} WHERE {column} IN (:b, :d)"),
                {"b": status["id"], "d": delivery["id"]},
            ).scalar_one()
            assert count == 0, table


def test_prune_takes_a_batchs_deliveries_with_it_once_they_are_done(
    calling_back: App, processing: App, tmp_path: Path
) -> None:
    """A finished batch whose callback is still queued is kept; once delivered, prune deletes
    the batch with its outbox rows and their lease groups, and never a delivery on its own."""
    app = calling_back
    with receiving() as receiver:
        status, _ = app.batches.submit(_request(write_photos(tmp_path / "src", 1), receiver.url))
        store = LocalStore(tmp_path / "store")
        assert run_batch(processing, store, status["id"])["state"] == "succeeded"
        (delivery,) = app.batches.status(status["id"])["deliveries"]
        assert app.batches.prune(0.001).batches == 0  # its callback is still queued
        assert app.batches.status(status["id"])["deliveries"][0]["id"] == delivery["id"]
        _deliver_until(app, receiver, 1)
    time.sleep(0.01)
    assert app.batches.prune(0.001).batches == 1
    with pytest.raises(NoSuchBatch):
        app.batches.status(status["id"])
    with app.engine.connect() as conn:
        for table, column in (("batchcrop_deliveries", "batch_id"), ("lease_groups", "id")):
            count = conn.execute(
                sa.text(f"SELECT count(*) FROM {table} WHERE {column} IN (:b, :d)"),
                {"b": status["id"], "d": delivery["id"]},
            ).scalar_one()
            assert count == 0, table


def test_prune_keeps_a_batch_that_ended_again_with_a_new_callback_after_it_was_listed(
    calling_back: App, tmp_path: Path
) -> None:
    """Listed by a prune with its delivered callback, then requeued and ended again (a new
    notification) before the prune deletes it: the delete step re-checks its deliveries under
    the group's lock and leaves the batch and both notifications alone."""
    app = calling_back
    with receiving() as receiver:
        status, _ = app.batches.submit(_request(write_photos(tmp_path / "src", 1), receiver.url))
        app.batches.cancel(status["id"])
        _deliver_until(app, receiver, 1)
        time.sleep(0.01)
        ((listed, own),) = app.batches.prunable(0.001)
        assert listed == status["id"]
        app.batches.requeue(status["id"], deadline_seconds=3600)
        app.batches.cancel(status["id"])  # ends again: a second notification
        time.sleep(0.01)
        assert app.batches.prune_batch(listed, own, 0.001) is None
        deliveries = app.batches.status(status["id"])["deliveries"]
        assert [d["state"] for d in deliveries] == ["succeeded", "queued"]
        _deliver_until(app, receiver, 2)
    assert len({r.key for r in receiver.requests}) == 2


def test_a_trickling_receiver_is_cut_off_at_the_deadline_and_stop_ends_within_it(
    calling_back: App, tmp_path: Path
) -> None:
    """A receiver sending its answer a byte every 0.2 s never exceeds the per-read timeout, but
    the delivery's total deadline (1.5 s here) ends the attempt as a `timeout`; a deliverer
    stopped meanwhile ends within that deadline, and the delivery it claimed beyond the
    destination's limit (one request at a time here) was given back unsent."""
    app = calling_back
    sources = write_photos(tmp_path / "src", 1)
    with trickling(0.2) as trickler:
        first, _ = app.batches.submit(_request(sources, trickler.url))
        second, _ = app.batches.submit(_request(sources, trickler.url))
        app.batches.cancel(first["id"])
        app.batches.cancel(second["id"])
        deliverer = app.deliverer("test-deliverer")
        assert deliverer is not None
        deliverer.client.timeout = httpx.Timeout(1.0)
        deliverer.deadline_seconds = 1.5
        deliverer.pacing.per_destination_max = 1
        started = time.monotonic()
        deliverer.start()
        wait_for(lambda: trickler.requests == 1, "the first request", 10)
        deliverer.stop()
        deliverer.join(10)
        elapsed = time.monotonic() - started
        assert not deliverer.is_alive()
    assert elapsed < 4.0, elapsed
    assert trickler.requests == 1
    states = sorted(
        (d["state"], d["reason"], d["attempts"])
        for batch in (first, second)
        for d in app.batches.status(batch["id"])["deliveries"]
    )
    assert states == [("queued", None, 0), ("retryable", "timeout", 1)]


BAD_IDNA_URL = "http://a\u2024b.example.com/hook"
"""A host name `urlsplit` accepts and IDNA refuses (U+2024, a one-dot leader)."""


def test_a_url_httpx_cannot_parse_is_refused_at_submission() -> None:
    """Submission parses the URL as the deliverer will: a host that is not valid IDNA, or a
    port out of range, is refused before it can reach the outbox."""
    for url in (BAD_IDNA_URL, "http://hooks.example.com:99999/x"):
        with pytest.raises(CallbackUrlError, match=r"not a valid URL|port"):
            check_callback_url(url, ("*.example.com", "hooks.example.com"))


def test_an_unsendable_stored_url_fails_alone_and_the_pass_goes_on(
    make_app: Callable[..., App], tmp_path: Path
) -> None:
    """A delivery whose stored URL is not valid IDNA (written before submission parsed URLs as
    httpx does) but whose host the allowlist matches fails `invalid_url` at once; another
    delivery of the same pass still goes."""
    app = make_app(callback_secret=SECRET, callback_hosts=("127.0.0.1:*", "*.example.com"))
    sources = write_photos(tmp_path / "src", 1)
    with receiving() as receiver:
        bad, _ = app.batches.submit(_request(sources, receiver.url))
        good, _ = app.batches.submit(_request(sources, receiver.url))
        with app.engine.begin() as conn:
            conn.execute(
                sa.text("UPDATE batchcrop_batches SET notify_url = :u WHERE id = :b"),
                {"u": BAD_IDNA_URL, "b": bad["id"]},
            )
        app.batches.cancel(bad["id"])
        app.batches.cancel(good["id"])
        deliverer = app.deliverer("test-deliverer")
        assert deliverer is not None
        assert deliverer.deliver_due() == 2
        assert len(receiver.processed) == 1
    (failed,) = app.batches.status(bad["id"])["deliveries"]
    assert (failed["state"], failed["reason"]) == ("failed", "invalid_url")
    (delivered,) = app.batches.status(good["id"])["deliveries"]
    assert delivered["state"] == "succeeded"


def test_redeliver_is_refused_while_a_requeued_batch_runs_again(
    calling_back: App, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A batch whose callback was delivered, then requeued: until it ends again, redeliver is
    refused (`NothingToRedeliver`: 409 in the API, exit 2 from the CLI) and writes nothing."""
    app = calling_back
    with receiving() as receiver:
        status, _ = app.batches.submit(_request([Path("/nowhere/a.jpg")], receiver.url))
        app.batches.cancel(status["id"])
        _deliver_until(app, receiver, 1)
    app.batches.requeue(status["id"], deadline_seconds=3600)
    with pytest.raises(NothingToRedeliver, match="has not ended"):
        app.batches.redeliver(status["id"])
    for given in (status["id"], status["id"][:8]):  # an id prefix names the batch too
        argv = ["redeliver", given, "--database-url", database_url]
        assert main(argv) == 2
        assert "has not ended" in capsys.readouterr().err
    assert len(app.batches.status(status["id"])["deliveries"]) == 1


def test_verify_answers_false_for_malformed_headers() -> None:
    """Whatever the header holds, `verify` answers False rather than raising."""
    body = b'{"id":"x"}'
    now = int(time.time())
    good = signature(SECRET, body, now)
    digest = good.split("v1=", 1)[1]
    for header in (
        "",
        "garbage",
        ",,,=,=",
        f"t=\u00b2,v1={digest}",  # a superscript two: isdigit() but not int()
        f"t=\u0661\u0662,v1={digest}",  # Arabic-Indic digits
        f"t={'9' * 400},v1={digest}",
        f"t=-{now},v1={digest}",
        f"t={now},t={now},v1={digest}",
        f"t={now},v1=\u00e9{digest[1:]}",  # non-ASCII: compare_digest raises on str
        f"t={now},v1=\ud800",
        f"t={now}",
        f"v1={digest}",
    ):
        assert verify(SECRET, body, header) is False, header
    assert verify(SECRET, body, good) is True


def test_id_lists_are_read_in_bounded_slices(calling_back: App, tmp_path: Path) -> None:
    """With more lease groups than one statement may list (here two real deliveries after
    1,001 unknown ids), the delivery lookup and the deliverer's claim still find them, and no
    statement carries more than `IN_LIST_IDS_MAX` ids."""
    app = calling_back
    sources = write_photos(tmp_path / "src", 1)
    with receiving() as receiver:
        batches = [app.batches.submit(_request(sources, receiver.url))[0] for _ in range(2)]
        for batch in batches:
            app.batches.cancel(batch["id"])
        real = [app.batches.status(b["id"])["deliveries"][0]["id"] for b in batches]
        many = [str(uuid.uuid4()) for _ in range(2 * IN_LIST_IDS_MAX + 1)] + real
        sizes: list[int] = []

        def count(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
            sizes.append(len(parameters or ()))

        sa.event.listen(app.engine, "before_cursor_execute", count)
        try:
            assert app.batches.deliveries_among(many) == set(real)
            deliverer = app.deliverer("test-deliverer")
            assert deliverer is not None
            deliverer.open_deliveries = lambda: many
            assert deliverer.deliver_due() == 2
        finally:
            sa.event.remove(app.engine, "before_cursor_execute", count)
        assert len(receiver.processed) == 2
    assert max(sizes) <= IN_LIST_IDS_MAX + PARAMETERS_BESIDE_IDS_MAX, max(sizes)


PARAMETERS_BESIDE_IDS_MAX = 20
"""A claim statement's own parameters (worker, limit, lease, token…) beside its id list."""


def test_the_signature_covers_the_notification_id(calling_back: App, tmp_path: Path) -> None:
    """The signed body carries the Idempotency-Key as `notification_id`: a receiver verifying
    with the key accepts the request, and the same signed body replayed under another key is
    refused, while the status document's fields are all there."""
    app = calling_back
    with receiving() as receiver:
        status, _ = app.batches.submit(_request(write_photos(tmp_path / "src", 1), receiver.url))
        app.batches.cancel(status["id"])
        _deliver_until(app, receiver, 1)
    (request,) = receiver.requests
    assert request.signed
    assert request.body["notification_id"] == request.key
    assert next(iter(request.body)) == "notification_id"
    extra = {"notification_id", "cause", "changed_items"}
    assert set(request.body) - extra == set(app.batches.status(status["id"]))
    assert verify(SECRET, request.raw, request.signature, idempotency_key=request.key)
    replayed_key = str(uuid.uuid4())
    assert not verify(SECRET, request.raw, request.signature, idempotency_key=replayed_key)
    assert not verify(
        SECRET, b"[]", signature(SECRET, b"[]", int(time.time())), idempotency_key="k"
    )


def test_a_name_resolving_to_an_internal_address_is_refused_at_delivery(
    make_app: Callable[..., App], tmp_path: Path
) -> None:
    """`localhost` listed by name passes submission, but it resolves to loopback: the delivery
    fails `address_not_allowed` without a request. The same receiver listed by its IP address
    is called; a wrong port is `port_not_allowed` at submission."""
    sources = write_photos(tmp_path / "src", 1)
    with receiving() as receiver:
        port = receiver.url.split(":")[2].split("/")[0]
        app = make_app(callback_secret=SECRET, callback_hosts=("localhost:*", f"127.0.0.1:{port}"))
        by_name, _ = app.batches.submit(
            _request(sources, receiver.url.replace("127.0.0.1", "localhost"))
        )
        by_address, _ = app.batches.submit(_request(sources, receiver.url))
        with pytest.raises(CallbackUrlError, match="names a port that is not allowed"):
            check_callback_url("http://127.0.0.1:1/x", app.settings.callback_hosts)
        for batch in (by_name, by_address):
            app.batches.cancel(batch["id"])
        deliverer = app.deliverer("test-deliverer")
        assert deliverer is not None
        assert deliverer.deliver_due() == 2
    (refused,) = app.batches.status(by_name["id"])["deliveries"]
    assert (refused["state"], refused["reason"]) == ("failed", "address_not_allowed")
    (delivered,) = app.batches.status(by_address["id"])["deliveries"]
    assert delivered["state"] == "succeeded"
    assert [r.key for r in receiver.requests] == [delivered["notification_id"]]
    events, _ = app.batches.events(by_name["id"], limit=100)
    assert "address_not_allowed" in [e["reason"] for e in events]


def test_the_transport_connects_only_to_the_checked_addresses(
    calling_back: App, tmp_path: Path
) -> None:
    """The deliverer's transport never resolves the URL's name itself: a request to a name
    that resolves nowhere reaches the address it was given; given none, it connects nowhere."""
    deliverer = calling_back.deliverer("test-deliverer")
    assert deliverer is not None
    with receiving() as receiver:
        port = receiver.url.split(":")[2].split("/")[0]
        url = f"http://pinned.invalid:{port}/hook"
        with deliverer.backend.request(5.0, ["127.0.0.1"]):
            assert deliverer.client.post(url, content=b"{}").status_code == 401  # unsigned
        with pytest.raises(httpx.ConnectError), deliverer.backend.request(5.0, []):
            deliverer.client.post(url.replace("pinned", "other"), content=b"{}")
    assert len(receiver.requests) == 1


def test_a_name_the_resolver_cannot_encode_is_a_connect_error_alone(
    make_app: Callable[..., App], tmp_path: Path
) -> None:
    """A host label of 64 characters passes URL parsing but the resolver's IDNA step refuses
    it (UnicodeError, not OSError): the attempt is a retryable `connect_error`, not a failed
    delivery pass."""
    app = make_app(callback_secret=SECRET, callback_hosts=("*.example.com",))
    url = "http://" + "a" * 64 + ".example.com/hook"
    status, _ = app.batches.submit(_request(write_photos(tmp_path / "src", 1), url))
    app.batches.cancel(status["id"])
    deliverer = app.deliverer("test-deliverer")
    assert deliverer is not None
    assert deliverer.deliver_due() == 1
    (delivery,) = app.batches.status(status["id"])["deliveries"]
    assert (delivery["state"], delivery["reason"]) == ("retryable", "connect_error")


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        ("64:ff9b::a00:1", True),  # NAT64 of 10.0.0.1
        ("64:ff9b::7f00:1", True),  # NAT64 of 127.0.0.1
        ("64:ff9b::a9fe:a9fe", True),  # NAT64 of 169.254.169.254
        ("64:ff9b:1::a00:1", True),  # local-use NAT64
        ("64:ff9b:1::808:808", True),
        ("2002:a00:1::1", True),  # 6to4 of 10.0.0.1
        ("2002:a9fe:a9fe::", True),  # 6to4 of 169.254.169.254
        ("::10.0.0.1", True),  # IPv4-compatible
        ("::8.8.8.8", True),
        ("::ffff:0:127.0.0.1", True),  # IPv4-translated
        ("::ffff:0:8.8.8.8", True),
        ("::ffff:169.254.169.254", True),  # IPv4-mapped
        ("64:ff9b::808:808", False),  # NAT64 of a public address
        ("2002:808:808::1", False),  # 6to4 of a public address
        ("2606:4700::1111", False),
        ("8.8.8.8", False),
    ],
)
def test_ipv6_forms_embedding_an_internal_ipv4_address_are_refused(
    address: str, refused: bool
) -> None:
    """A name resolving to an IPv6 address that carries packets to an internal IPv4 address
    (NAT64, 6to4, IPv4-compatible, -translated or -mapped) is `address_not_allowed`."""
    url = httpx.URL("https://hooks.example.com/x")
    expected = "address_not_allowed" if refused else None
    assert expected == address_refusal(url, [address])
