"""Submission: what a batch is asked as (`BatchRequest`, its fingerprint and its limits) and
`Submissions.submit`, which creates the batch and its items atomically for every reader, or
returns the batch an idempotency key already names.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchcrop.batches.allowance import allow_failures_text
from batchcrop.batches.errors import EmptyBatch, IdempotencyConflict
from batchcrop.batches.items import ItemList, ItemRequest, time_ordered_uuids
from batchcrop.batches.reads import Reads
from batchcrop.callbacks.delivery import check_callback_url
from batchcrop.crop.spec import RenderSpec
from batchcrop.db import queries
from batchcrop.errors import FieldError
from batchcrop.settings import DEADLINE_SECONDS_MAX, MAX_ATTEMPTS_MAX
from leases import ConstraintViolation, LeaseManager
from leases.models import check_priority
from storage import canonical_store_url

IDEMPOTENCY_KEY_CHARS_MAX = 200
"""The width of `batchcrop_batches.idempotency_key`: a longer key cannot be stored."""


@dataclass(frozen=True)
class BatchRequest:
    """What to submit: everything that defines a batch, and how a repeat of the submission
    finds it. Two equal requests hash equal. `label` is a human name for tables and filters
    (`batches --label`). `items` is kept as an `ItemList` (any sequence of `ItemRequest`s given
    is converted).

    `idempotency_key`: the same key with the same request returns the batch it made (the key is
    not part of the fingerprint). `resumable` (`batchcrop run`): the service derives the key
    instead (`_run_key`), so the same command line finds its batch again; give one or the other.
    `forced` (`run --force`, resumable only): a batch of its own, since resuming the unforced
    one would render nothing."""

    items: Sequence[ItemRequest]
    spec: RenderSpec
    deadline_seconds: float
    max_attempts: int
    label: str | None = None
    callback_url: str | None = None
    allow_failures: str | None = None
    """How many failed items the batch tolerates (`allow_failures_text`: `5`, `2.5%`)."""
    idempotency_key: str | None = None
    resumable: bool = False
    forced: bool = False
    priority: int = 0
    """How its claims rank against other batches' (docs/design.md §3, sharing). Not part of
    the fingerprint: it can be changed later, so a repeat with another priority is the same
    batch."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", ItemList.of(self.items))
        if self.allow_failures is not None:
            object.__setattr__(self, "allow_failures", allow_failures_text(self.allow_failures))
        if self.resumable and self.idempotency_key is not None:
            raise ValueError("a resumable request derives its idempotency key: give no key")
        if self.forced and not self.resumable:
            raise ValueError("only a resumable request can be forced")
        check_priority(self.priority)

    @property
    def item_list(self) -> ItemList:
        """`items`, typed as what it is."""
        assert isinstance(self.items, ItemList)
        return self.items

    def fingerprint(self) -> str:
        """sha256 over the canonical request, for idempotency checks: the JSON (sorted keys) of
        the items' `fingerprinted()` forms, the render request's record at the top level beside
        the batch's own fields, `label` and `notify_url` only when set (so requests without
        them keep their fingerprints). The items' text comes from `ItemList.fingerprint_json`,
        spliced where `json.dumps` would write it."""
        body: dict[str, Any] = {
            "items": _ITEMS_PLACEHOLDER,
            **self.spec.fingerprinted(),
            "deadline_seconds": self.deadline_seconds,
            "max_attempts": self.max_attempts,
        }
        if self.label is not None:
            body["label"] = self.label
        if self.callback_url is not None:
            body["notify_url"] = self.callback_url
        if self.allow_failures is not None:
            body["allow_failures"] = self.allow_failures
        slot = '"items": ' + json.dumps(_ITEMS_PLACEHOLDER)
        before, after = json.dumps(body, sort_keys=True).split(slot, 1)
        digest = hashlib.sha256(before.encode())
        digest.update(b'"items": ')
        digest.update(self.item_list.fingerprint_json().encode())
        digest.update(after.encode())
        return digest.hexdigest()


_ITEMS_PLACEHOLDER = "\0items\0"
"""Stands for the items in the fingerprint's JSON until their text is spliced in; its encoded
form (with the key before it) occurs nowhere else in that JSON."""


def _run_key(request: BatchRequest, fingerprint: str, store_url: str) -> str:
    """The idempotency key of a resumable request (`batchcrop run`): the request's
    `fingerprint` (sources, render request, limits), the store's canonical URL, and each local
    source's size and mtime (so a changed picture makes a new batch), and `forced`."""
    digest = hashlib.sha256(fingerprint.encode())
    digest.update(store_url.encode())
    if request.forced:
        digest.update(b"force")
    for item in request.items:
        path = Path(item.source)
        if path.is_file():
            stat = path.stat()
            digest.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
    return "run:" + digest.hexdigest()


class Submissions:
    """Creates batches; the store recorded on each is this service's (`store`)."""

    def __init__(
        self,
        leases: LeaseManager,
        reads: Reads,
        *,
        store: str | None = None,
        callback_hosts: tuple[str, ...] = (),
    ) -> None:
        self.leases = leases
        self.reads = reads
        self.store = store
        self.callback_hosts = callback_hosts

    def submit(self, request: BatchRequest) -> tuple[dict[str, Any], bool]:
        """Create a batch and its items, atomically for every reader; returns (status, created).

        The batch records this service's store (its canonical URL): only workers of that store
        serve it. The same idempotency key with the same request and store returns the existing
        batch (created=False); with another request or store it raises IdempotencyConflict (the
        store is not part of the fingerprint, so keys in flight across the upgrade keep matching).
        A resumable request's key is derived from its fingerprint, this service's store and its
        local sources' sizes and mtimes.
        """
        if not request.items:
            raise EmptyBatch("a batch needs at least one source image")
        _check_limits(request)
        if request.callback_url is not None:
            check_callback_url(request.callback_url, self.callback_hosts)
        store = None if self.store is None else canonical_store_url(self.store)
        fingerprint = request.fingerprint()
        idempotency_key = request.idempotency_key
        if request.resumable:
            idempotency_key = _run_key(request, fingerprint, store or "")
        if idempotency_key is not None:
            _check_idempotency_key(idempotency_key)
            existing = self._by_idempotency_key(idempotency_key, fingerprint, store)
            if existing is not None:
                return self.reads.status(existing), False
        batch_id = str(uuid.uuid4())
        # (id, payload text) pairs, made as the lease engine reads them (chunk by chunk).
        items = zip(time_ordered_uuids(), request.item_list.payload_texts(), strict=False)
        row = queries.insert_batch(
            batch_id=batch_id,
            spec=request.spec.to_record(),
            idempotency_key=idempotency_key,
            request_hash=fingerprint,
            store=store,
            label=request.label,
            notify_url=request.callback_url,
            allow_failures=request.allow_failures,
        )
        try:
            # The batch row is written by the transaction that seals the group, so the batch
            # appears whole or not at all, while no transaction holds the write lock for long.
            self.leases.create_group(
                batch_id,
                deadline_seconds=request.deadline_seconds,
                max_attempts=request.max_attempts,
                items=items,
                on_seal=lambda conn: conn.execute(row),
                notify_finish=request.callback_url is not None,
                priority=request.priority,
            )
        except ConstraintViolation:
            # Two submissions raced on one idempotency key: the loser returns the winner's batch.
            if idempotency_key is None:
                raise
            existing = self._by_idempotency_key(idempotency_key, fingerprint, store)
            if existing is None:
                raise
            return self.reads.status(existing), False
        return self.reads.status(batch_id), True

    def _by_idempotency_key(self, key: str, fingerprint: str, store: str | None) -> str | None:
        with self.leases.reading() as conn:
            row = conn.execute(queries.batch_by_idempotency_key(key)).mappings().first()
        if row is None:
            return None
        # A batch from before stores were recorded has none: it matches any.
        other_store = None not in (row["store"], store) and row["store"] != store
        if row["request_hash"] != fingerprint or other_store:
            raise IdempotencyConflict(
                "this Idempotency-Key was already used for a different request"
            )
        return str(row["id"])


def _check_limits(request: BatchRequest) -> None:
    """Refuse what the database cannot store: a database error here would be a crash, not a
    usage error (ValueError: exit 2 on the CLI)."""
    check_max_attempts(request.max_attempts)
    check_deadline(request.deadline_seconds)
    _check_label(request.label)


def check_max_attempts(count: int) -> None:
    """The one attempts cap of the CLI and the API (`FieldError`: exit 2 naming the flag, or a
    422 naming the field)."""
    if not 1 <= count <= MAX_ATTEMPTS_MAX:
        raise FieldError(
            "max_attempts", f"max_attempts must be in 1..{MAX_ATTEMPTS_MAX}, got {count}"
        )


def check_deadline(seconds: float) -> None:
    """The one deadline limit of the CLI and the API (ValueError: exit 2, or a 422)."""
    if not 0 < seconds <= DEADLINE_SECONDS_MAX:
        days = round(DEADLINE_SECONDS_MAX / 86400)
        raise ValueError(f"the deadline must be positive and at most {days} days from now")


def _check_idempotency_key(key: str) -> None:
    """Refuse a key the column cannot hold (PostgreSQL would fail the insert, not truncate)."""
    if not 1 <= len(key) <= IDEMPOTENCY_KEY_CHARS_MAX or "\0" in key:
        raise ValueError(
            f"the idempotency key must be 1 to {IDEMPOTENCY_KEY_CHARS_MAX} characters, without NUL"
        )


LABEL_CHARS_MAX = 200
"""The width of `batchcrop_batches.label`."""


LABEL_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
"""Unicode categories a label may not hold: controls; format characters, which reorder what an
operator reads in a table, a page or a terminal (the bidirectional marks, embeddings, overrides
and isolates) or are invisible, so that two labels reading alike differ (U+200B, U+FEFF,
U+00AD, tag characters); line and paragraph separators (U+2028, U+2029), which break a row."""


def label_text(label: str) -> str:
    """`label` if the column can hold it and every reader shows it as typed: 1 to
    `LABEL_CHARS_MAX` characters, none of `LABEL_REFUSED_CATEGORIES`; ValueError otherwise
    (the API's 422, the CLI's exit 2)."""
    if not 1 <= len(label) <= LABEL_CHARS_MAX or any(
        unicodedata.category(c) in LABEL_REFUSED_CATEGORIES for c in label
    ):
        raise ValueError(
            f"the label must be 1 to {LABEL_CHARS_MAX} characters, without control, "
            "invisible or bidirectional formatting characters or line separators"
        )
    return label


def _check_label(label: str | None) -> None:
    if label is not None:
        label_text(label)
