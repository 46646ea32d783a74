"""Fixtures of the storage contract suite: one `store` per backend, plus S3-only variants.

`store` runs each contract test on a local folder, on moto in process and on a live Ceph RGW.
S3 stores use a key prefix so prefix handling is exercised on every test.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest

from storage import LocalStore, ObjectStore, S3Settings, S3Store
from tests.s3_fixtures import (
    moto_s3,
    moto_session,
    rgw,
    rgw_bucket,
    rgw_session,
    rgw_settings,
)
from tests.services.rgw import RGWEndpoint

__all__ = ["moto_s3", "rgw", "rgw_bucket"]  # fixtures imported for this folder's tests

STORE_PREFIX = "pre/fix"
BACKENDS = ["local", "moto", pytest.param("rgw", marks=pytest.mark.rgw)]
S3_BACKENDS = ["moto", pytest.param("rgw", marks=pytest.mark.rgw)]
RACE_BACKENDS = ["local", pytest.param("rgw", marks=pytest.mark.rgw)]

StoreFactory = Callable[..., S3Store]
"""Builds another `S3Store` on the test bucket with `S3Settings` overrides, e.g. timeouts."""


def _s3_factory(request: pytest.FixtureRequest, backend: str) -> StoreFactory:
    if backend == "moto":
        base: S3Store = request.getfixturevalue("moto_s3")

        def make_moto(**overrides: Any) -> S3Store:
            settings = S3Settings(region="us-east-1", **overrides)
            client = settings.client(moto_session())
            return S3Store(base.bucket, STORE_PREFIX, settings=settings, client=client)

        return make_moto
    endpoint: RGWEndpoint = request.getfixturevalue("rgw")
    bucket: S3Store = request.getfixturevalue("rgw_bucket")

    def make_rgw(**overrides: Any) -> S3Store:
        settings = rgw_settings(endpoint, **overrides)
        return S3Store(
            bucket.bucket,
            STORE_PREFIX,
            settings=settings,
            client=settings.client(rgw_session(endpoint)),
        )

    return make_rgw


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    """An empty store of each backend: local folder, moto, Ceph RGW."""
    if request.param == "local":
        return LocalStore(tmp_path / "store")
    return _s3_factory(request, request.param)()


@pytest.fixture(params=S3_BACKENDS)
def s3_factory(request: pytest.FixtureRequest) -> StoreFactory:
    """A factory of S3 stores on an empty test bucket, for moto and Ceph RGW."""
    return _s3_factory(request, request.param)


@pytest.fixture(params=RACE_BACKENDS)
def race_store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    """A store whose put-if-absent is atomic under races (moto is not: it checks then writes)."""
    if request.param == "local":
        return LocalStore(tmp_path / "store")
    return _s3_factory(request, request.param)()


@pytest.fixture
def stub_client() -> Any:
    """A real boto3 S3 client with dummy credentials, for `botocore.stub.Stubber` tests."""
    session = boto3.session.Session(
        aws_access_key_id="stub", aws_secret_access_key="stub", region_name="us-east-1"
    )
    return S3Settings(region="us-east-1").client(session)
