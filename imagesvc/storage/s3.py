"""The ``s3`` object store: any S3-compatible server (AWS, Ceph RGW, MinIO, R2, moto) through one aiobotocore client.

Foreign errors stop here: botocore's exceptions become ``ObjectNotFound``, ``ObjectExists``, ``InvalidRequest`` or
``StoreUnavailable`` (with the endpoint and the cause: unreachable, credentials refused, bucket missing, failing).
Retries are botocore's "standard" mode: exponential backoff with jitter for connection errors, 5xx and throttling,
at most ``max_attempts`` tries, so a dead server fails in seconds, not minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession, get_session
from botocore.exceptions import BotoCoreError, ClientError, ConnectTimeoutError, EndpointConnectionError

from imagesvc.errors import ImagesvcError, InvalidRequest
from imagesvc.storage import ObjectExists, ObjectInfo, ObjectNotFound, StoredObject, StoreUnavailable, check_key

__all__ = ["S3Config", "S3Store"]

_MIB = 1024 * 1024
_CHUNK = _MIB  # bytes a streamed download holds at a time
_DEFAULT_TYPE = "application/octet-stream"
_AUTH_CODES = frozenset(
    {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken", "ExpiredToken", "403"}
)
_MISSING_CODES = frozenset({"NoSuchKey", "NotFound", "404"})


@dataclass(frozen=True)
class S3Config:
    """Where the bucket is and how hard to try. Empty keys mean botocore's own credential chain."""

    endpoint_url: str
    bucket: str
    region: str = "us-east-1"
    access_key: str = ""
    secret_key: str = ""
    max_attempts: int = 3  # total tries per request, the first included
    connect_timeout: float = 3.0
    read_timeout: float = 30.0
    multipart_threshold: int = 8 * _MIB  # objects larger than this are uploaded in parts
    part_size: int = 8 * _MIB  # S3 needs >= 5 MiB for every part but the last
    multipart_concurrency: int = 4
    list_page_size: int = 1000  # keys per ListObjectsV2 request (1000 is the S3 maximum)
    max_pool_connections: int = 16


_session: AioSession | None = None


def _shared_session() -> AioSession:
    """One botocore session per process: it caches the parsed S3 service model, which costs ~0.3 s to load."""
    global _session
    if _session is None:
        _session = get_session()
    return _session


def _etag(raw: str | None) -> str:
    return (raw or "").strip('"')


def _error_code(exc: ClientError) -> tuple[str, int]:
    error = exc.response.get("Error", {})
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return str(error.get("Code", status)), int(status)


def _keep(out: Any, digest: Any, chunk: bytes) -> None:
    digest.update(chunk)
    out.write(chunk)


class S3Store:
    """An ``ObjectStore`` in one bucket. The client is made on first use and reused; call ``close`` when done."""

    name = "s3"

    def __init__(self, config: S3Config) -> None:
        self.config = config
        self._where = f"S3 endpoint {config.endpoint_url or 'AWS ' + config.region}, bucket {config.bucket!r}"
        self._client: Any = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._lock = asyncio.Lock()

    async def _get_client(self) -> Any:
        if self._client is None:
            async with self._lock:
                if self._client is None:
                    cfg = self.config
                    aio_config = AioConfig(
                        region_name=cfg.region,
                        connect_timeout=cfg.connect_timeout,
                        read_timeout=cfg.read_timeout,
                        retries={"total_max_attempts": cfg.max_attempts, "mode": "standard"},
                        max_pool_connections=cfg.max_pool_connections,
                        s3={"addressing_style": "path"},
                        # Only checksums S3 demands: older servers (Ceph 16) reject the default trailing CRC32.
                        request_checksum_calculation="when_required",
                        response_checksum_validation="when_required",
                    )
                    stack = contextlib.AsyncExitStack()
                    self._client = await stack.enter_async_context(
                        _shared_session().create_client(
                            "s3",
                            endpoint_url=cfg.endpoint_url or None,
                            aws_access_key_id=cfg.access_key or None,
                            aws_secret_access_key=cfg.secret_key or None,
                            config=aio_config,
                        )
                    )
                    self._stack = stack
        return self._client

    def _translate(self, exc: Exception, key: str | None = None) -> ImagesvcError:
        """The imagesvc error for a botocore failure; callers ``raise ... from exc``."""
        if isinstance(exc, ClientError):
            code, status = _error_code(exc)
            if key is not None and code in _MISSING_CODES:
                return ObjectNotFound(key)
            if key is not None and (code == "PreconditionFailed" or status == 412):
                return ObjectExists(key)
            if code == "InvalidRange" or status == 416:
                return InvalidRequest(f"Byte range is past the end of {key!r}.", details={"key": key})
            if code == "NoSuchBucket" or (key is None and status == 404):
                return StoreUnavailable(
                    f"{self._where}: the bucket does not exist.",
                    recovery=["Create the bucket (S3Store.ensure_bucket) or correct IMAGESVC_S3_BUCKET."],
                )
            if code in _AUTH_CODES or status == 403:
                return StoreUnavailable(
                    f"{self._where}: the server refused our credentials ({code}).",
                    recovery=["Check IMAGESVC_S3_ACCESS_KEY and IMAGESVC_S3_SECRET_KEY and the bucket's policy."],
                )
            return StoreUnavailable(f"{self._where}: request failed with {code} (HTTP {status}).")
        if isinstance(exc, EndpointConnectionError | ConnectTimeoutError):
            return StoreUnavailable(
                f"{self._where}: cannot connect ({exc}) after {self.config.max_attempts} attempts.",
                recovery=["Check that the S3 server is running and IMAGESVC_S3_ENDPOINT is right."],
            )
        return StoreUnavailable(f"{self._where}: {type(exc).__name__}: {exc}")

    async def put(
        self, key: str, data: bytes, *, content_type: str = _DEFAULT_TYPE, if_none_match: bool = False
    ) -> ObjectInfo:
        check_key(key)
        client = await self._get_client()
        try:
            if len(data) > self.config.multipart_threshold:
                return await self._put_multipart(client, key, data, content_type, if_none_match)
            extra = {"IfNoneMatch": "*"} if if_none_match else {}
            resp = await client.put_object(
                Bucket=self.config.bucket, Key=key, Body=data, ContentType=content_type, **extra
            )
        except (ClientError, BotoCoreError) as exc:
            raise self._translate(exc, key) from exc
        return ObjectInfo(key=key, size=len(data), etag=_etag(resp.get("ETag")), content_type=content_type)

    async def _put_multipart(
        self, client: Any, key: str, data: bytes, content_type: str, if_none_match: bool
    ) -> ObjectInfo:
        bucket = self.config.bucket
        if if_none_match and await self.head(key) is not None:
            # Fail before uploading. The condition on complete settles races where the server honours it (AWS,
            # moto); Ceph RGW 16 ignores it there, so two racing large conditional puts can both succeed.
            raise ObjectExists(key)
        upload = await client.create_multipart_upload(Bucket=bucket, Key=key, ContentType=content_type)
        upload_id = upload["UploadId"]
        size = self.config.part_size
        limit = asyncio.Semaphore(self.config.multipart_concurrency)

        async def send(number: int, offset: int) -> dict[str, Any]:
            async with limit:
                part = await client.upload_part(
                    Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data[offset : offset + size]
                )
            return {"PartNumber": number, "ETag": part["ETag"]}

        try:
            parts = await asyncio.gather(*(send(i + 1, offset) for i, offset in enumerate(range(0, len(data), size))))
            extra = {"IfNoneMatch": "*"} if if_none_match else {}
            done = await client.complete_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}, **extra
            )
        except BaseException:
            # Abandoned parts cost storage until a lifecycle rule removes them: abort now, best effort.
            with contextlib.suppress(ClientError, BotoCoreError):
                await client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
            raise
        etag = _etag(done.get("ETag"))
        if not etag:
            # Ceph RGW 16 answers CompleteMultipartUpload with an empty ETag; HEAD reports the real one.
            info = await self.head(key)
            etag = info.etag if info else ""
        return ObjectInfo(key=key, size=len(data), etag=etag, content_type=content_type)

    async def put_file(self, key: str, path: Path, *, content_type: str = _DEFAULT_TYPE) -> ObjectInfo:
        """``put`` of the file at ``path``: past ``multipart_threshold`` a multipart upload whose parts are read from
        the file only when a slot is free, so at most ``multipart_concurrency`` parts are in memory at once."""
        check_key(key)
        size = (await asyncio.to_thread(os.stat, path)).st_size
        if size <= self.config.multipart_threshold:
            return await self.put(key, await asyncio.to_thread(Path(path).read_bytes), content_type=content_type)
        client = await self._get_client()
        bucket, part_size = self.config.bucket, self.config.part_size
        try:
            upload = await client.create_multipart_upload(Bucket=bucket, Key=key, ContentType=content_type)
        except (ClientError, BotoCoreError) as exc:
            raise self._translate(exc, key) from exc
        upload_id = upload["UploadId"]
        limit = asyncio.Semaphore(self.config.multipart_concurrency)

        def read(offset: int) -> bytes:
            with open(path, "rb") as f:
                f.seek(offset)
                return f.read(part_size)

        async def send(number: int, offset: int) -> dict[str, Any]:
            async with limit:  # the part is read only once its upload may start
                body = await asyncio.to_thread(read, offset)
                part = await client.upload_part(
                    Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body
                )
                del body
            return {"PartNumber": number, "ETag": part["ETag"]}

        try:
            parts = await asyncio.gather(*(send(i + 1, at) for i, at in enumerate(range(0, size, part_size))))
            done = await client.complete_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
            )
        except BaseException as exc:
            with contextlib.suppress(ClientError, BotoCoreError):
                await client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
            if isinstance(exc, ClientError | BotoCoreError):
                raise self._translate(exc, key) from exc
            raise
        etag = _etag(done.get("ETag"))
        if not etag:  # Ceph RGW 16 (see _put_multipart)
            info = await self.head(key)
            etag = info.etag if info else ""
        return ObjectInfo(key=key, size=size, etag=etag, content_type=content_type)

    async def get_file(self, key: str, path: Path) -> tuple[int, str]:
        """Stream object ``key`` into the new file ``path`` a chunk at a time: (size, sha256)."""
        check_key(key)
        client = await self._get_client()
        digest, size = hashlib.sha256(), 0
        out = await asyncio.to_thread(open, path, "xb")
        try:
            try:
                resp = await client.get_object(Bucket=self.config.bucket, Key=key)
                async with resp["Body"] as body:
                    while chunk := await body.read(_CHUNK):
                        size += len(chunk)
                        await asyncio.to_thread(_keep, out, digest, chunk)  # hashing and writing off the loop
            except (ClientError, BotoCoreError) as exc:
                raise self._translate(exc, key) from exc
            finally:
                await asyncio.to_thread(out.close)
        except BaseException:
            Path(path).unlink(missing_ok=True)
            raise
        return size, digest.hexdigest()

    async def get(self, key: str, *, byte_range: tuple[int, int] | None = None) -> StoredObject:
        check_key(key)
        extra: dict[str, str] = {}
        if byte_range is not None:
            start, end = byte_range
            if start < 0 or end < start:
                raise InvalidRequest(f"Invalid byte range {byte_range!r}: expected 0 <= start <= end.")
            extra["Range"] = f"bytes={start}-{end}"
        client = await self._get_client()
        try:
            resp = await client.get_object(Bucket=self.config.bucket, Key=key, **extra)
            async with resp["Body"] as body:
                data = await body.read()
        except (ClientError, BotoCoreError) as exc:
            raise self._translate(exc, key) from exc
        total = len(data)
        if content_range := resp.get("ContentRange"):
            total = int(content_range.rpartition("/")[2])  # "bytes 0-9/1234"
        info = ObjectInfo(
            key=key, size=total, etag=_etag(resp.get("ETag")), content_type=resp.get("ContentType") or _DEFAULT_TYPE
        )
        return StoredObject(info=info, data=data)

    async def _call(
        self, operation: str, key: str | None = None, tolerate: frozenset[str] = frozenset(), **kw: Any
    ) -> Any:
        """Call ``operation`` on our bucket; an error coded in ``tolerate`` gives ``None``, others are translated."""
        client = await self._get_client()
        if key is not None:
            kw["Key"] = key
        try:
            return await getattr(client, operation)(Bucket=self.config.bucket, **kw)
        except ClientError as exc:
            if _error_code(exc)[0] in tolerate:
                return None
            raise self._translate(exc, key) from exc
        except BotoCoreError as exc:
            raise self._translate(exc, key) from exc

    async def head(self, key: str) -> ObjectInfo | None:
        resp = await self._call("head_object", check_key(key), _MISSING_CODES)
        if resp is None:
            return None
        return ObjectInfo(
            key=key,
            size=int(resp["ContentLength"]),
            etag=_etag(resp.get("ETag")),
            content_type=resp.get("ContentType") or _DEFAULT_TYPE,
        )

    async def delete(self, key: str) -> None:
        await self._call("delete_object", check_key(key), _MISSING_CODES)

    async def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        client = await self._get_client()
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=self.config.bucket, Prefix=prefix, PaginationConfig={"PageSize": self.config.list_page_size}
        )
        try:
            async for page in pages:
                for item in page.get("Contents", ()):
                    yield ObjectInfo(key=item["Key"], size=int(item["Size"]), etag=_etag(item.get("ETag")))
        except (ClientError, BotoCoreError) as exc:
            raise self._translate(exc) from exc

    async def ping(self) -> None:
        await self._call("head_bucket")

    async def ensure_bucket(self) -> None:
        """Create the bucket if it is missing (for tests and single-box setups). Raises ``StoreUnavailable``."""
        if await self._call("head_bucket", tolerate=_MISSING_CODES | {"NoSuchBucket"}) is not None:
            return
        extra: dict[str, Any] = {}
        if self.config.region != "us-east-1":
            extra["CreateBucketConfiguration"] = {"LocationConstraint": self.config.region}
        await self._call("create_bucket", tolerate=frozenset({"BucketAlreadyOwnedByYou"}), **extra)

    async def close(self) -> None:
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()
