"""Item error families: the class decides retry, the category is what users see.

`PermanentItemError` ends an item `failed` at once; `TransientItemError` makes it `retryable`
until the attempts cap. Categories are public and stable (docs/design.md §3) and never carry
secrets or stack traces. `detail` is what the decoder or store said; it is shown only through
`public_message`, the one place that makes such text safe to show (ADR 0017).
"""

from __future__ import annotations

import re
from enum import StrEnum

from leases import MESSAGE_MAX_CHARS, StopReason

REDACTED_URL = "<url>"
REDACTED_PATH = "<path>"
REDACTED_SECRET = "<secret>"  # noqa: S105 (a placeholder shown instead of a secret)
ELLIPSIS = "…"

# What is cut out of a message before it is shown, in this order: a stack trace and all after
# it; terminal escape sequences (CSI, OSC); control characters (C0, DEL, C1, Unicode line and
# paragraph separators) become spaces; URLs of any scheme (they may carry credentials and name
# buckets and sources) and absolute or relative file paths, each up to the next ": " or the end
# (a name may hold spaces; the messages this sees put a path last or before ": "); credentials
# written as name=value, `Bearer x` or `user:password@host`; AWS access key ids; then any word
# holding a path separator (object keys, source names).
_TRACEBACK = re.compile(r"Traceback \(most recent call last\).*", re.DOTALL)
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://.*?(?=: |$)")
_FILE_PATH = re.compile(r"(?:(?<=[\s'\"(\[])|^)(?:~?/|\.{1,2}/|[A-Za-z]:\\|\\\\).*?(?=: |$)")
_USERINFO = re.compile(r"\S+:\S*@\S+")
_SECRET = re.compile(
    r"(?i)\b([\w-]*(?:secret|password|passwd|token|credential|api[_-]?key|signature)[\w-]*)"
    r"\s*[=:]\s*\S+"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+\S+")
_AWS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")
_PATH = re.compile(r"""[^\s'"`()\[\]{}<>,;]*[/\\][^\s'"`()\[\]{}<>,;:]*""")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SPACES = re.compile(r"\s+")


class Category(StrEnum):
    """Public error categories written on items and events."""

    INVALID_IMAGE = "invalid_image"
    IMAGE_TOO_LARGE = "image_too_large"
    UNSUPPORTED_IMAGE = "unsupported_image"
    INVALID_FOCUS = "invalid_focus"
    RENDER_TIMEOUT = "render_timeout"
    SOURCE_NOT_FOUND = "source_not_found"
    SOURCE_TOO_LARGE = "source_too_large"
    DERIVATIVE_CONFLICT = "derivative_conflict"
    STORAGE_ACCESS_DENIED = "storage_access_denied"
    SOURCE_UNAVAILABLE = "source_unavailable"
    STORAGE_UNAVAILABLE = "storage_unavailable"
    DEPENDENCY_TIMEOUT = "dependency_timeout"
    INTERNAL_ERROR = "internal_error"
    LEASE_EXPIRED = "lease_expired"
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    INTERRUPTED = "interrupted"
    # The lease engine's stop reasons, written as the category of the item they abandon.
    DEADLINE_EXCEEDED = StopReason.DEADLINE_EXCEEDED.value
    CANCELLED = StopReason.CANCELLED.value


class BatchcropError(Exception):
    """Base of every error batchcrop raises on purpose."""


class ItemError(BatchcropError):
    """Processing one item failed; `category` says how, publicly."""

    category: Category = Category.INTERNAL_ERROR

    def __init__(self, detail: str = "", *, category: Category | None = None) -> None:
        super().__init__(detail or self.category.value)
        self.detail = detail
        if category is not None:
            self.category = category


class PermanentItemError(ItemError):
    """Retrying cannot help: the item ends `failed`."""


class TransientItemError(ItemError):
    """Retrying may help: the item becomes `retryable` until the attempts cap."""


def public_message(text: str | None, *, max_chars: int = MESSAGE_MAX_CHARS) -> str | None:
    """`text` (what a decoder, store or library said) made safe to show anyone: one line of at
    most `max_chars` characters, without stack traces, escape or control characters, URLs,
    credentials or anything path-like (file paths, object keys, source names), each replaced by
    a placeholder. None when nothing is left to say. The one sanitiser of attempt messages
    (docs/design.md §3, error categories)."""
    if not text:
        return None
    cleaned = _TRACEBACK.sub(" ", text)
    cleaned = _ESCAPES.sub(" ", cleaned)
    cleaned = _CONTROL.sub(" ", cleaned)
    cleaned = _URL.sub(REDACTED_URL, cleaned)
    cleaned = _FILE_PATH.sub(REDACTED_PATH, cleaned)
    cleaned = _USERINFO.sub(REDACTED_URL, cleaned)
    cleaned = _SECRET.sub(lambda m: f"{m.group(1)}={REDACTED_SECRET}", cleaned)
    cleaned = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED_SECRET}", cleaned)
    cleaned = _AWS_KEY_ID.sub(REDACTED_SECRET, cleaned)
    cleaned = _PATH.sub(_path_or_placeholder, cleaned)
    cleaned = _SPACES.sub(" ", cleaned).strip(" :")
    if not cleaned:
        return None
    if len(cleaned) > max_chars:
        cleaned = cleaned[: max_chars - len(ELLIPSIS)].rstrip() + ELLIPSIS
    return cleaned


def _path_or_placeholder(match: re.Match[str]) -> str:
    """A placeholder for a path-like word; the placeholders already put in stay as they are."""
    word = match.group(0)
    return word if word in (REDACTED_URL, REDACTED_PATH, REDACTED_SECRET) else REDACTED_PATH


class FieldError(ValueError):
    """A request field with an unusable value; `field` names it (`ratios[1]`, `max_attempts`).
    The API's problem documents and the CLI's usage errors name the field their own way
    (`max_side: …`, `--max-side …`), so the message may begin with its name (`named`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field

    @property
    def named(self) -> str:
        """How the message begins by naming the field (`field_named`)."""
        return field_named(self.field, str(self))

    @property
    def reason(self) -> str:
        """The message after that (`must be in 16..10000, got -5`)."""
        return str(self).removeprefix(self.named)


def field_named(field: str, message: str) -> str:
    """How `message` begins by naming `field` or its list (`max_side `, `pad_colour: `,
    `ratios: ` for `ratios[1]`), or "" when it does not."""
    name = field.split("[", 1)[0]
    prefixes = (f"{field}: ", f"{name}: ", f"{field} ", f"{name} ")
    return next((said for said in prefixes if message.startswith(said)), "")


def without_field(field: str, message: str) -> str:
    """`message` without the naming of `field` it may begin with (`field_named`)."""
    return message.removeprefix(field_named(field, message))
