"""The operator's web page served by `batchcrop serve`: HTML shells, JavaScript and CSS.

The shells carry no batch data, so they are served without the API token; every piece of data
and every image is fetched by the page's JavaScript from the `/v1` API with the bearer token.
"""

from batchcrop.web.pages import page_router

__all__ = ["page_router"]
