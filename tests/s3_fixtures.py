"""S3 fixtures for every test suite: moto in process, and a fresh bucket on a live Ceph RGW.

Register with `pytest_plugins = ["tests.s3_fixtures"]` (or import the fixtures in a conftest).
RGW tests skip when the gateway cannot run here and `CI` is unset; under `CI` they fail, so the
live-S3 half of a suite can never vanish silently.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from storage import S3Settings, S3Store
from tests.services import rgw as rgw_service

IN_CI = bool(os.environ.get("CI"))
MOTO_REGION = "us-east-1"


@functools.cache
def _session(access_key: str, secret_key: str) -> boto3.session.Session:
    # One session per process and credentials: clients made from it share its parsed service
    # models, which makes a new client ten times cheaper. Tests create clients on one thread.
    return boto3.session.Session(
        aws_access_key_id=access_key, aws_secret_access_key=secret_key, region_name=MOTO_REGION
    )


def rgw_session(endpoint: rgw_service.RGWEndpoint) -> boto3.session.Session:
    """A boto3 session holding the test gateway's credentials (never the process environment)."""
    return _session(endpoint.access_key, endpoint.secret_key)


def moto_session() -> boto3.session.Session:
    """A boto3 session with dummy credentials, for clients made inside `mock_aws()`."""
    return _session("moto-access", "moto-secret")


def rgw_settings(endpoint: rgw_service.RGWEndpoint, **overrides: Any) -> S3Settings:
    """`S3Settings` pointing at the test gateway; keyword overrides replace single fields."""
    return S3Settings(endpoint_url=endpoint.url, region=MOTO_REGION, **overrides)


def empty_and_delete_bucket(client: Any, bucket: str) -> None:
    """Delete every object of `bucket`, then the bucket (test cleanup)."""
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
    client.delete_bucket(Bucket=bucket)


@pytest.fixture(scope="session")
def rgw() -> rgw_service.RGWEndpoint:
    """This checkout's running Ceph RGW (started once, shared by xdist workers and reruns)."""
    try:
        return rgw_service.ensure()
    except (rgw_service.RGWUnavailableError, OSError) as exc:
        if IN_CI:
            pytest.fail(f"Ceph RGW is required under CI: {exc}")
        pytest.skip(f"Ceph RGW not available: {exc}")


@pytest.fixture
def rgw_bucket(rgw: rgw_service.RGWEndpoint) -> Iterator[S3Store]:
    """An `S3Store` on a fresh, empty RGW bucket, deleted with its objects afterwards."""
    settings = rgw_settings(rgw)
    client = settings.client(rgw_session(rgw))
    bucket = f"bc-test-{uuid.uuid4().hex[:16]}"
    client.create_bucket(Bucket=bucket)
    yield S3Store(bucket, settings=settings, client=client)
    empty_and_delete_bucket(client, bucket)


@pytest.fixture
def moto_s3() -> Iterator[S3Store]:
    """An `S3Store` on a bucket of an in-process moto S3 (not a race oracle: see S3 docs)."""
    with mock_aws():
        settings = S3Settings(region=MOTO_REGION)
        client = settings.client(moto_session())
        bucket = f"bc-test-{uuid.uuid4().hex[:16]}"
        client.create_bucket(Bucket=bucket)
        yield S3Store(bucket, settings=settings, client=client)
