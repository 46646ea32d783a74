"""The batch status HTTP API served by `batchcrop serve` (docs/design.md §7, docs/api.md)."""

from batchcrop.api.application import create_api
from batchcrop.api.server import serve

__all__ = ["create_api", "serve"]
