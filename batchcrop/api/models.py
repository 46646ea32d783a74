"""Request bodies and the documented response shapes of the HTTP API.

Request models are strict (a number is not a string, `true` is not `1`) and reject unknown
fields, so a typo is a 422 naming the field rather than a silently ignored setting. Every limit
is a named constant: a request over a limit is a 422 (or a 413 for the body size), never a 500.
Response models only document the contract in OpenAPI; the endpoints return the documents that
`batchcrop.batches.documents` builds, unchanged.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StringConstraints,
    WithJsonSchema,
)

from batchcrop.batches.allowance import ALLOW_FAILURES_COUNT_MAX, allow_failures_text
from batchcrop.batches.documents import DerivativeDocument, PreviewDocument
from batchcrop.batches.items import (
    FOCUS_PX_MAX,
    REF_CHARS_MAX,
    SOURCE_CHARS_MAX,
    focus_box,
    storable_text,
)
from batchcrop.batches.submission import LABEL_CHARS_MAX, label_text
from batchcrop.callbacks.delivery import CALLBACK_URL_CHARS_MAX
from batchcrop.crop.spec import RenderSpec
from batchcrop.crop.thumbnails import PREVIEW_MAX_SIDE_PX
from batchcrop.settings import (
    DEADLINE_SECONDS,
    DEADLINE_SECONDS_MAX,
    MAX_ATTEMPTS,
    MAX_ATTEMPTS_MAX,
)
from leases import PRIORITY_MAX, PRIORITY_MIN, REQUEUEABLE, State, state_names

ITEMS_PER_BATCH_MAX = 100_000
RATIO_CHARS_MAX = 16
REQUEUE_ITEM_IDS_MAX = 10_000
UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


REQUEUEABLE_NAMES = state_names(REQUEUEABLE)


def _requeueable(name: str) -> str:
    if name not in REQUEUEABLE_NAMES:
        raise ValueError(f"only {' and '.join(REQUEUEABLE_NAMES)} items can be requeued")
    return name


# The state names come from the lease engine's enum (strict=False: JSON gives them as text).
StateName = Annotated[State, Field(strict=False)]
RequeueableState = Annotated[
    str,
    AfterValidator(_requeueable),
    WithJsonSchema({"type": "string", "enum": REQUEUEABLE_NAMES}),
]
SourceText = Annotated[
    str, StringConstraints(min_length=1, max_length=SOURCE_CHARS_MAX), AfterValidator(storable_text)
]
RefText = Annotated[str, StringConstraints(max_length=REF_CHARS_MAX), AfterValidator(storable_text)]
RatioText = Annotated[str, StringConstraints(min_length=1, max_length=RATIO_CHARS_MAX)]
UuidText = Annotated[str, StringConstraints(pattern=UUID_PATTERN)]
LabelText = Annotated[
    str,
    StringConstraints(min_length=1, max_length=LABEL_CHARS_MAX),
    AfterValidator(storable_text),
    AfterValidator(label_text),
]
LabelFilter = Annotated[
    str, StringConstraints(max_length=LABEL_CHARS_MAX), AfterValidator(storable_text)
]
"""A label to filter by: only text a database can compare (PostgreSQL refuses NUL in a
parameter), so that it is a 422 on every database instead of a 500 on one."""
Seconds = Annotated[float, Field(gt=0, le=DEADLINE_SECONDS_MAX, allow_inf_nan=False)]
CallbackUrlText = Annotated[
    str,
    StringConstraints(min_length=1, max_length=CALLBACK_URL_CHARS_MAX),
    Field(
        description="POSTed the final status document, signed, when the batch ends; its "
        "host must be listed in BATCHCROP_CALLBACK_HOSTS"
    ),
]
SearchText = Annotated[
    str,
    StringConstraints(min_length=1, max_length=SOURCE_CHARS_MAX),
    AfterValidator(storable_text),
]
"""A search of the batch list: as long as the longest source it may name."""


def _allowance(value: object) -> str:
    """A count (a JSON integer, not a boolean) or a percentage text, canonical
    (`allow_failures_text`): one rule, one field name in the 422 whatever the JSON type."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError('allow_failures must be a count (5) or a percentage ("2.5%")')
    return allow_failures_text(value)


AllowFailures = Annotated[
    str,
    PlainValidator(_allowance),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": ALLOW_FAILURES_COUNT_MAX},
                {"type": "string", "pattern": r"^[0-9]{1,3}(\.[0-9]{1,2})?%$"},
            ]
        }
    ),
]


Priority = Annotated[
    int,
    Field(
        ge=PRIORITY_MIN,
        le=PRIORITY_MAX,
        strict=True,
        description="how the batch's claims rank against other batches': higher first, a "
        "waiting batch rising one level per aging step up to the highest (docs/design.md §3)",
    ),
]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


def _focus_box(values: list[int]) -> list[int]:
    """The checks of `batchcrop.batches.service.focus_box` (right after left, bottom after top)."""
    return list(focus_box(values))


Coordinate = Annotated[int, Field(ge=0, le=FOCUS_PX_MAX)]
FocusBox = Annotated[
    list[Coordinate],
    Field(
        min_length=4,
        max_length=4,
        description="[left, top, right, bottom] in upright source pixels (after EXIF "
        "orientation), right and bottom exclusive: every derivative contains this box when it "
        "fits and is centred on it otherwise",
    ),
    AfterValidator(_focus_box),
]


FormatName = Literal["jpeg", "webp", "avif"]
"""An output format (`batchcrop.crop.spec.FORMAT_NAMES`)."""
FitName = Literal["crop", "pad", "auto"]
"""A fit (`batchcrop.crop.spec.FIT_NAMES`)."""
QualityMatchName = Literal["table", "jpeg"]
"""How WebP's and AVIF's settings are found (`batchcrop.crop.spec.QUALITY_MATCHES`)."""


def _render_field(name: str) -> Any:
    """The body field of the `RenderSpec` field `name`: its default, limits and description are
    the field's declaration (`RenderSpec.declared`), so they cannot drift from its checks."""
    declared = RenderSpec.declared(name)
    if declared.text:
        return Field(default=declared.default_record, description=declared.help)
    if declared.is_list:
        return Field(
            default=declared.default_record,
            min_length=declared.low,
            max_length=declared.high,
            description=declared.help,
        )
    return Field(
        default=declared.default_record,
        ge=declared.low,
        le=declared.high,
        description=declared.help,
    )


class ItemBody(_Strict):
    """One source image: a path under an allowed root or `s3://bucket/key`, a caller ref, and
    optionally where the product is (`focus_box`)."""

    source: SourceText
    ref: RefText | None = None
    focus_box: FocusBox | None = None


class BatchBody(_Strict):
    """`POST /v1/batches`: the items and how to render them."""

    items: Annotated[list[ItemBody], Field(min_length=1, max_length=ITEMS_PER_BATCH_MAX)]
    # The render request (`RenderSpec`): types here, for mypy and the schema; default, limits
    # and description from the field's declaration (`tests/api/test_render_fields.py` checks
    # every declared field is here, with the declared type).
    ratios: list[RatioText] = _render_field("ratios")
    max_side: int = _render_field("max_side")
    quality: int = _render_field("quality")
    formats: list[FormatName] = _render_field("formats")
    widths: list[int] = _render_field("widths")
    fit: FitName = _render_field("fit")
    pad_colour: str = _render_field("pad_colour")
    trim: int = _render_field("trim")
    background: str = _render_field("background")
    quality_match: QualityMatchName = _render_field("quality_match")
    deadline_seconds: Seconds = DEADLINE_SECONDS
    max_attempts: Annotated[int, Field(ge=1, le=MAX_ATTEMPTS_MAX)] = MAX_ATTEMPTS
    priority: Priority = 0
    label: Annotated[
        LabelText | None, Field(description="a human label, shown in listings and filterable")
    ] = None
    callback_url: CallbackUrlText | None = None
    notify_url: Annotated[
        CallbackUrlText | None,
        Field(
            json_schema_extra={"deprecated": True},  # marked, without pydantic's warning on reads
            description="deprecated: the former name of `callback_url`",
        ),
    ] = None
    allow_failures: Annotated[
        AllowFailures | None,
        Field(
            description="failed items the batch tolerates and still ends `succeeded`: a count "
            '(5) or a percentage of its items ("2.5%"); null or absent: none'
        ),
    ] = None

    @property
    def callback_url_field(self) -> str:
        """The body field that carries the callback URL (`notify_url`: its deprecated name)."""
        return "notify_url" if self.notify_url is not None else "callback_url"

    @property
    def given_callback_url(self) -> str | None:
        """The callback URL, under whichever name it was given."""
        return self.callback_url if self.notify_url is None else self.notify_url


class RecropBody(_Strict):
    """`POST /v1/batches/{id}/items/{item_id}/recrop`: the focus box to render the item with."""

    focus_box: FocusBox


class WindowDocument(BaseModel):
    """One ratio's previewed window."""

    ratio: str
    fit: Annotated[FitName, Field(description="the fit its derivatives would use: crop or pad")]
    crop_box: Annotated[
        list[int],
        Field(
            description="[left, top, right, bottom] in upright source pixels: the crop_box "
            "its derivatives would have"
        ),
    ]
    frame_box: Annotated[
        list[int],
        Field(
            description="the output's extent in upright source pixels: the crop box, or for a "
            "padded output the picture with its padding (reaching past the source)"
        ),
    ]


class WindowsDocument(BaseModel):
    """`GET …/windows`: where each of the batch's ratios would crop the item's source."""

    source_width: int
    source_height: int
    focus_box: Annotated[
        list[int] | None, Field(description="the focus box as the render uses it: clipped")
    ]
    trim_box: Annotated[
        list[int] | None,
        Field(description="the source box left after trimming (null: the batch trims nothing)"),
    ]
    windows: list[WindowDocument]


class RecropConflictDocument(BaseModel):
    """The 409 of a re-crop of an item that is not succeeded or failed."""

    type: str
    title: str
    status: int
    detail: str
    instance: str
    state: Annotated[StateName, Field(description="the item's state")]
    focus_box: Annotated[
        list[int] | None, Field(description="its current box: the pending re-crop's")
    ]


def _requeueable_states() -> list[str]:
    return list(REQUEUEABLE_NAMES)


class PriorityBody(_Strict):
    """`POST /v1/batches/{id}/priority`: the batch's new priority."""

    priority: Priority


class RequeueBody(_Strict):
    """`POST /v1/batches/{id}/requeue`: which items get a fresh attempt budget.

    `deadline_seconds` (from now) is required when the batch was cancelled or is past its
    deadline, or the reaper would abandon the requeued items again at once.
    """

    states: Annotated[
        list[RequeueableState], Field(min_length=1, max_length=len(REQUEUEABLE_NAMES))
    ] = Field(default_factory=_requeueable_states)
    item_ids: (
        Annotated[list[UuidText], Field(min_length=1, max_length=REQUEUE_ITEM_IDS_MAX)] | None
    ) = None
    deadline_seconds: Seconds | None = None


class DeliveryDocument(BaseModel):
    """One delivery of a completion callback (docs/design.md §7, callbacks)."""

    id: str
    notification_id: Annotated[str, Field(description="the Idempotency-Key sent")]
    state: Annotated[StateName, Field(description="succeeded: delivered")]
    attempts: int
    reason: Annotated[
        str | None, Field(description="why the last attempt failed: http_503, timeout, ...")
    ]
    updated_at: str


class StatusDocument(BaseModel):
    """The batch status document (docs/design.md §7)."""

    id: str
    state: StateName
    cancel_requested: bool
    paused: Annotated[
        bool,
        Field(
            description="no item is claimed while true (`pause`, `resume`); attempts under way "
            "finish, the deadline runs on"
        ),
    ]
    priority: Annotated[int, Field(description="higher is claimed first, with aging")]
    ratios: list[str]
    max_side: int
    quality: int
    formats: list[FormatName]
    quality_match: QualityMatchName
    total: int
    counts: Annotated[
        dict[StateName, int],
        Field(description="items per state, every state present; they add up to `total`"),
    ]
    failures: dict[str, int]
    created_at: str
    updated_at: str
    deadline_at: str
    oldest_updated_at: str | None
    terminal_reason: str | None
    poll_until: str
    store: Annotated[
        str | None,
        Field(
            description="the store its derivatives go to (`s3://bucket/prefix` or `file:///dir`), "
            "recorded at submission; null for batches submitted before stores were recorded"
        ),
    ]
    label: str | None
    callback_url: Annotated[
        str | None, Field(description="where the final status document is POSTed, or null")
    ]
    notify_url: Annotated[
        str | None,
        Field(
            json_schema_extra={"deprecated": True},  # marked, without pydantic's warning on reads
            description="the same as `callback_url`, its former name",
        ),
    ]
    deliveries: Annotated[
        list[DeliveryDocument],
        Field(description="the completion callback's deliveries, oldest first"),
    ]
    allow_failures: Annotated[
        str | None,
        Field(description='the failures tolerated, as submitted ("5", "2.5%"), or null'),
    ]
    failures_allowed: Annotated[
        int,
        Field(
            description="how many failed items the batch tolerates (a percentage of `total` "
            "rounded down): with none abandoned and at most this many failed, a batch whose "
            "items all ended is `succeeded`"
        ),
    ]


class BatchPage(BaseModel):
    """One page of status documents, newest first."""

    batches: list[StatusDocument]
    next_cursor: str | None


class ItemDocument(BaseModel):
    """The item document (docs/design.md §7)."""

    id: str
    batch_id: str
    ref: str | None
    source: str
    focus_box: list[int] | None
    state: StateName
    attempt: int
    error_category: str | None
    updated_at: str
    derivatives: list[DerivativeDocument]
    preview: Annotated[
        PreviewDocument | None,
        Field(
            description="the stored preview of the upright source (a JPEG of at most "
            f"{PREVIEW_MAX_SIDE_PX} px), "
            "with the upright source's size; null until a worker rendered the item"
        ),
    ]
    error_message: Annotated[
        str | None,
        Field(description="why the last attempt failed, as the decoder or store said it"),
    ]


class ItemPage(BaseModel):
    """One page of items in submission order."""

    items: list[ItemDocument]
    next_cursor: str | None


class EventDocument(BaseModel):
    """One transition of the timeline (docs/design.md §7)."""

    id: int
    item_id: str
    batch_id: str
    attempt: int
    from_state: StateName | None
    to_state: StateName
    at: str
    worker_id: str | None
    lease_token: str | None
    reason: str | None
    correlation_id: str | None
    kind: Annotated[
        Literal["item", "delivery"],
        Field(description="delivery: a transition of a callback delivery (item_id is its id)"),
    ]
    focus_box: Annotated[
        list[int] | None,
        Field(description="an operator re-crop's box (reason `recrop`), else null"),
    ]
    message: Annotated[
        str | None,
        Field(description="a failed attempt's message, as the decoder or store said it"),
    ]


class EventPage(BaseModel):
    """One page of the timeline, oldest first."""

    events: list[EventDocument]
    next_cursor: str | None


class ProblemDocument(BaseModel):
    """RFC 9457 problem details; `errors` lists the offending fields of a 422."""

    type: str
    title: str
    status: int
    detail: str
    instance: str
    errors: list[dict[str, str]] | None = None


class Meta(BaseModel):
    """`GET /v1/meta`: the state vocabulary, each list in the lifecycle order of `states`."""

    states: list[StateName]
    terminal_states: list[StateName]
    unfinished_states: list[StateName]
    requeueable_states: list[StateName]
    recroppable_states: list[StateName]


class Health(BaseModel):
    """`GET /healthz`: the database answered."""

    status: Literal["ok"]


class WorkerDocument(BaseModel):
    """One worker of the registry (`batchcrop.batches.fleet`); `status` `alive`, `absent` (not
    seen for the worker timeout: its leases are being released) or `unregistered` (holds leases,
    never registered: host, times and settings are null)."""

    id: str
    status: Literal["alive", "absent", "unregistered"]
    host: str | None
    pid: int | None
    version: str | None
    started_at: str | None
    last_seen_at: str | None
    seen_seconds_ago: float | None
    concurrency: int | None
    batch_ids: list[str] | None
    store: str | None
    leases_held: int
    oldest_lease_at: str | None
    in_flight: int | None
    held_not_in_flight: int


class WorkerList(BaseModel):
    """`GET /v1/workers`."""

    workers: list[WorkerDocument]
