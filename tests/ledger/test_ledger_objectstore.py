"""The object store backend against moto's S3 server on 127.0.0.1 (via s3fs, async)."""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from agent_health.ledger import audit, backends, chain, errors, objectstore, records, store
from moto.server import ThreadedMotoServer

KEY = b"s" * 32
CREDENTIALS = {"key": "testing", "secret": "testing"}
_buckets = itertools.count()


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def bucket(s3_endpoint: str) -> str:
    """A fresh, empty bucket on the moto server."""
    name = f"ledger-{next(_buckets)}"
    client: Any = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    client.create_bucket(Bucket=name)
    return name


def s3_options() -> store.Options:
    return store.Options(storage_options=dict(CREDENTIALS))


def list_keys(endpoint: str, bucket: str) -> list[str]:
    client: Any = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    listing = client.list_objects_v2(Bucket=bucket)
    return sorted(item["Key"] for item in listing.get("Contents", []))


async def test_round_trip_as_part_objects(s3_endpoint: str, bucket: str) -> None:
    url = f"s3://{bucket}/runs/run-1?endpoint_url={s3_endpoint}"
    backend = backends.from_url(url, s3_options())
    assert isinstance(backend, objectstore.ObjectStoreBackend)
    assert await backend.cells() == []
    assert await backend.read("c1") == []
    writer = chain.Writer(backend, "c1", KEY)
    await writer.append(records.CellMeta(test_id="t", repeat=0, run_id="run-1"))
    await writer.append(
        records.SignalRecord(signal={"a": 1}), records.SignalRecord(signal={"b": 2})
    )
    await writer.append(records.CellEnd(status="failed", exit_code=1))
    await backend.append("c2", ["x"])
    lines = await backend.read("c1")
    assert [json.loads(line)["seq"] for line in lines] == [0, 1, 2, 3]
    assert chain.verify(lines, KEY).ok
    assert await backend.cells() == ["c1", "c2"]
    await backend.flush()
    await backend.close()
    assert await asyncio.to_thread(list_keys, s3_endpoint, bucket) == [
        "runs/run-1/c1/00000000.jsonl",
        "runs/run-1/c1/00000001.jsonl",
        "runs/run-1/c1/00000002.jsonl",
        "runs/run-1/c2/00000000.jsonl",
    ]

    report = await audit.verify_url(url, KEY, options=s3_options())
    assert str(report.cells[0]) == "c1: ok (4 records)"
    assert report.first_bad is not None
    assert report.first_bad.cell == "c2"  # "x" is no record
    assert report.first_bad.result.problem is not None
    assert report.first_bad.result.problem.reason == "bad-json"


async def test_tampered_object_is_named(s3_endpoint: str, bucket: str) -> None:
    url = f"s3://{bucket}/p?endpoint_url={s3_endpoint}"
    backend = backends.from_url(url, s3_options())
    writer = chain.Writer(backend, "cell", KEY)
    await writer.append(records.CellMeta(test_id="t", repeat=0, run_id="r"))
    await writer.append(records.SignalRecord(signal={"passed": False}))
    await writer.append(records.CellEnd(status="failed"))
    await backend.close()

    def overwrite() -> None:
        client: Any = boto3.client(
            "s3", endpoint_url=s3_endpoint, region_name="us-east-1",
            aws_access_key_id="testing", aws_secret_access_key="testing",
        )  # fmt: skip
        body = client.get_object(Bucket=bucket, Key="p/cell/00000001.jsonl")["Body"].read()
        forged = body.replace(b'"passed":false', b'"passed":true')
        assert forged != body
        client.put_object(Bucket=bucket, Key="p/cell/00000001.jsonl", Body=forged)

    await asyncio.to_thread(overwrite)
    report = await audit.verify_url(url, KEY, options=s3_options())
    assert report.first_bad is not None
    assert str(report.first_bad).startswith("cell: line 2 (seq 1): edited")


async def test_concurrent_appends_keep_order(s3_endpoint: str, bucket: str) -> None:
    backend = backends.from_url(f"s3://{bucket}/p?endpoint_url={s3_endpoint}", s3_options())
    writer = chain.Writer(backend, "c", KEY)
    await writer.append(records.CellMeta(test_id="t", repeat=0, run_id="r"))
    await asyncio.gather(*(writer.append(records.SignalRecord(signal={"n": n})) for n in range(30)))
    lines = await backend.read("c")
    assert [json.loads(line)["seq"] for line in lines] == list(range(31))
    assert chain.verify(lines, KEY, complete=False).ok
    await backend.close()


async def test_a_new_backend_continues_the_parts(s3_endpoint: str, bucket: str) -> None:
    url = f"s3://{bucket}/p?endpoint_url={s3_endpoint}"
    first = backends.from_url(url, s3_options())
    await first.append("c", ["one"])
    await first.close()
    second = backends.from_url(url, s3_options())
    await second.append("c", ["two"])
    assert await second.read("c") == ["one", "two"]
    await second.close()


async def test_missing_bucket_is_a_backend_error(s3_endpoint: str) -> None:
    backend = backends.from_url(f"s3://no-such-bucket/p?endpoint_url={s3_endpoint}", s3_options())
    with pytest.raises(errors.BackendError, match=r"ledger s3://no-such-bucket/p"):
        await backend.append("c", ["x"])
    await backend.close()


def test_url_errors() -> None:
    with pytest.raises(errors.BackendConfigError, match="names no bucket"):
        backends.from_url("s3:///prefix")
    with pytest.raises(errors.BackendConfigError, match=r"unknown option\(s\) colour"):
        backends.from_url("s3://b/p?colour=blue")


@pytest.mark.skipif(importlib.util.find_spec("gcsfs") is not None, reason="gcsfs is installed")
async def test_gs_without_gcsfs_names_the_extra() -> None:
    backend = backends.from_url("gs://bucket/prefix")
    with pytest.raises(errors.BackendConfigError, match=r"pip install 'agent-health\[gcs\]'"):
        await backend.cells()
