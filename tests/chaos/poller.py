"""A client polling the status of every batch through a live `batchcrop serve` during chaos.

It records every HTTP status it is answered with and checks what a client may rely on in every
answer: counts add up to `total`; a batch's terminal item count never goes down; a terminal batch
stays terminal with the same document (and no `Retry-After`); a 304 only answers an unchanged
ETag. Outages may be answered 503, never another 5xx.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import httpx

POLL_INTERVAL_SECONDS = 0.3
CLIENT_TIMEOUT_SECONDS = 10.0
TERMINAL = ("succeeded", "failed", "abandoned")


class Poller:
    """Polls `GET /v1/batches/{id}` for each id with `If-None-Match`, in a daemon thread."""

    def __init__(self, base_url: str, batch_ids: list[str]) -> None:
        self.base_url = base_url
        self.batch_ids = batch_ids
        self.answers: Counter[int] = Counter()
        self.violations: list[str] = []
        self.transport_errors = 0
        self._etags: dict[str, str] = {}
        self._last: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-poller", daemon=True)

    def start(self) -> None:
        """Start polling."""
        self._thread.start()

    def stop(self) -> None:
        """Stop polling and wait for the thread."""
        self._stop.set()
        self._thread.join(CLIENT_TIMEOUT_SECONDS * 2)

    def _run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=CLIENT_TIMEOUT_SECONDS) as client:
            while not self._stop.wait(POLL_INTERVAL_SECONDS):
                for batch_id in self.batch_ids:
                    self._poll(client, batch_id)

    def _poll(self, client: httpx.Client, batch_id: str) -> None:
        headers = {"If-None-Match": self._etags[batch_id]} if batch_id in self._etags else {}
        try:
            response = client.get(f"/v1/batches/{batch_id}", headers=headers)
        except httpx.HTTPError:
            self.transport_errors += 1  # the server restarting its connections, say
            return
        self.answers[response.status_code] += 1
        if response.status_code >= 500 and response.status_code != 503:
            self.violations.append(f"GET {batch_id}: {response.status_code} {response.text[:200]}")
        if response.status_code == 304 and batch_id not in self._etags:
            self.violations.append(f"GET {batch_id}: 304 without an ETag sent")
        if response.status_code == 200:
            self._check(batch_id, response.json(), response.headers)
            self._etags[batch_id] = response.headers["ETag"]

    def _check(self, batch_id: str, doc: dict[str, Any], headers: httpx.Headers) -> None:
        counts = doc["counts"]
        if sum(counts.values()) != doc["total"]:
            self.violations.append(f"{batch_id}: counts {counts} do not add up to {doc['total']}")
        terminal = sum(counts[s] for s in TERMINAL)
        last = self._last.get(batch_id)
        if last is not None:
            if terminal < sum(last["counts"][s] for s in TERMINAL):
                self.violations.append(f"{batch_id}: terminal items went down to {terminal}")
            # A terminal batch's document changes only as its callback is delivered.
            if last["state"] in TERMINAL and _without_deliveries(doc) != _without_deliveries(last):
                self.violations.append(f"{batch_id}: terminal batch changed to {doc['state']}")
        if doc["state"] in TERMINAL and "Retry-After" in headers:
            self.violations.append(f"{batch_id}: terminal batch answered with Retry-After")
        self._last[batch_id] = doc


def _without_deliveries(doc: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in doc.items() if key != "deliveries"}
