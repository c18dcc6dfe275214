"""S3 access: boto3 for the control plane (its hooks: tasks/io/botocore_hooks.py), the AWS
Common Runtime for source GETs (plain ``awscrt.http`` connections, tasks/io/connections.py;
its S3 client with S3ARCH_GET_PATH=crt, tasks/io/crt.py). Bodies read through boto3:
tasks/io/reads.py.

Both planes take credentials, region and endpoint from one boto3 session, so the Airflow
layer (S3Hook's session), the CLI (standard AWS configuration) and the tests (a MinIO on
loopback) all drive the same code. The data plane sends each GET to exactly the host, path
style and region that botocore resolved for the bucket (FIPS, China, dual-stack and VPC
endpoints included), read once from a HeadBucket. Errors from either plane are classified
by ``classify.error_for``.
"""

from __future__ import annotations

import re
import threading
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config

from s3arch.core import backoff
from s3arch.core.config import resolve_throttle_budget
from s3arch.core.errors import AccessDenied, BadArgument
from s3arch.io.classify import IO_ERRORS, status_of, translate
from s3arch.io import botocore_hooks
from s3arch.io.connections import PlainDataPlane
from s3arch.io.proxies import get_path, proxy_for
from s3arch.io.crt import Planes
from s3arch.io.dataplane import BucketRoute, SourceRequests
from s3arch.io.store import Sent, Store

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client  # typing only (requirements-test.txt)

DIRECTORY_BUCKET_SUFFIX = "--x-s3"  # S3 Express One Zone directory buckets: BUCKET--AZID--x-s3


def refuse_directory_bucket(bucket: str, role: str) -> None:
    """S3 Express One Zone directory buckets are refused until supported: their listings are in
    no key order and take no StartAfter (ranges, segments and the deletion merge assume both),
    and they use a session auth the data plane is not built with."""
    if bucket.endswith(DIRECTORY_BUCKET_SUFFIX):
        raise BadArgument(f"{role} bucket s3://{bucket} is an S3 Express directory bucket (its name ends in "
                          f"{DIRECTORY_BUCKET_SUFFIX}); directory buckets are not supported yet",
                          hint="use a general purpose bucket for the source and the destination "
                               "(copy the prefix to one first if it lives in a directory bucket)")


@dataclass
class S3Clients:
    """The two planes over one session; both count their requests in ``store.sent`` (the
    planes of ``data_for`` and ``writes_for`` as well: tasks/io/dataplane.py)."""

    session: boto3.Session
    control: S3Client
    endpoint_url: str | None
    region: str
    verify: bool | str | None = None  # False: no TLS verification; a path: that CA bundle
    expected_owner: str | None = None  # the account every bucket used must belong to (from_session)
    # The caller's own botocore Config (an Airflow connection's), unmerged: worker processes
    # and other planes rebuild their clients from it, and read its proxies.
    botocore_config: Config | None = None
    _routes: dict = field(default_factory=dict)
    _planes: Planes | None = None  # made on first use: the CRT side's shared objects
    _single: Any = None  # ``single_attempt``, made on first use
    _store: Store | None = None  # ``store``, made on first use
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_session(cls, session: boto3.Session | None = None, endpoint_url: str | None = None,
                     max_pool_connections: int = 32, max_attempts: int = backoff.BOTOCORE.tries,
                     read_timeout: float = 120.0, verify: bool | str | None = None,
                     botocore_config: Config | None = None, throttle_budget: float | None = None,
                     expected_owner: str | None = None) -> "S3Clients":
        """Both planes from one session. ``verify`` and ``botocore_config`` are boto3's (the
        Airflow connection's); the engine's retry and pool settings are the base they refine.
        ``throttle_budget``: seconds a control-plane call may stay throttled (default
        S3ARCH_THROTTLE_BUDGET, else 900): pass the run's ``ArchiveSpec.throttle_budget``.
        ``expected_owner``: the account (or ``"self"``, the caller's own) named as
        ``ExpectedBucketOwner`` on every request of both planes: S3 answers 403 for a bucket
        another account owns, so a bucket name taken over elsewhere fails instead of receiving
        data."""
        try:
            return cls._made(session, endpoint_url, max_pool_connections, max_attempts, read_timeout, verify,
                             botocore_config, throttle_budget, expected_owner)
        except IO_ERRORS as exc:  # a profile that is not there, a malformed config: before any request
            raise translate(exc, "set up the S3 clients", "bucket") from exc

    @classmethod
    def _made(cls, session, endpoint_url, max_pool_connections, max_attempts, read_timeout, verify,
              botocore_config, throttle_budget, expected_owner) -> "S3Clients":
        session, ca_bundle = botocore_hooks.engine_session(session or boto3.Session())
        region = session.region_name or "us-east-1"
        config = Config(retries={"mode": "standard", "max_attempts": max_attempts},
                        max_pool_connections=max_pool_connections,
                        connect_timeout=10, read_timeout=read_timeout)
        if botocore_config is not None:
            config = config.merge(botocore_config)
        control = session.client("s3", endpoint_url=endpoint_url, region_name=region, verify=verify,
                                 config=botocore_hooks.with_s3_options(config, path_style=bool(endpoint_url)))
        # boto3 also reads AWS_ENDPOINT_URL(_S3) and the profile's endpoint_url; a non-AWS
        # endpoint found there (MinIO, Ceph) wants path-style requests like an explicit one.
        resolved = control.meta.endpoint_url
        custom = endpoint_url or (None if re.search(r"\.amazonaws\.com(\.cn)?/?$", resolved) else resolved)
        if custom and not endpoint_url:
            control = session.client("s3", endpoint_url=custom, region_name=region, verify=verify,
                                     config=botocore_hooks.with_s3_options(config, path_style=True))
        botocore_hooks.prepare(control, resolve_throttle_budget(throttle_budget))
        if verify is None:  # AWS_CA_BUNDLE or the profile's ca_bundle, as botocore reads them: the CRT plane too
            verify = ca_bundle or None
        if expected_owner == "self":
            expected_owner = botocore_hooks.own_account(session, region, verify, botocore_config)
        if expected_owner:
            botocore_hooks.add_expected_owner(control, expected_owner)
        return cls(session=session, control=control, endpoint_url=custom, region=region, verify=verify,
                   expected_owner=expected_owner, botocore_config=botocore_config)

    @property
    def store(self) -> Store:
        """The control client behind the engine's S3 boundary (tasks/io/store.py): what every
        module above tasks/io sends its requests through."""
        with self._lock:
            if self._store is None:
                self._store = Store(self.control)
            return self._store

    @property
    def single_attempt_store(self) -> Store:
        """``single_attempt`` behind the boundary; its requests count with ``store``'s."""
        client = self.single_attempt
        return Store(client, sent=self.store.sent)

    @property
    def single_attempt(self):
        """The control client without botocore's retries, for calls whose failure should be
        seen at once: S3 answers "Expedited capacity unavailable" with a 503 that retrying for
        half a minute does not cure, when falling back to another tier would."""
        with self._lock:
            if self._single is None:
                # From the endpoint as configured (None on AWS), never control.meta.endpoint_url: a
                # resolved AWS endpoint passed back in is a custom one, whose host botocore's region
                # redirect keeps, so a bucket in another region answered 301 again.
                self._single = self.session.client(
                    "s3", endpoint_url=self.endpoint_url, region_name=self.region, verify=self.verify,
                    config=self.control.meta.config.merge(Config(retries={"mode": "standard",
                                                                          "total_max_attempts": 1})))
                if self.expected_owner:
                    botocore_hooks.add_expected_owner(self._single, self.expected_owner)
            return self._single

    def check_bucket(self, bucket: str, role: str, prefix: str = "") -> BucketRoute:
        """HeadBucket ``bucket``: fail with a typed error naming it, else remember where
        botocore sent the request and which region answered, for the data plane. HeadBucket
        needs s3:ListBucket without an s3:prefix condition; where it is denied, a listing of
        ``prefix`` (if given) that passes proves the bucket usable instead. Its requests count
        in ``store.sent``, as every other's."""
        what = f"{role} bucket s3://{bucket}"
        refuse_directory_bucket(bucket, role)
        sent_count = self.store.sent
        sent: list[tuple[str, str]] = []

        def capture(request, **_):
            # Other threads may check other buckets at the same time: only this bucket's request.
            url = urllib.parse.urlsplit(request.url)
            if url.path.rstrip("/") == f"/{bucket}" or url.netloc.startswith(f"{bucket}."):
                sent.append((request.url, str(request.headers.get("Authorization") or "")))

        self.control.meta.events.register("before-send.s3.HeadBucket", capture)
        self.control.meta.events.register("before-send.s3.ListObjectsV2", capture)
        try:
            response = self._head_or_list(bucket, prefix, sent_count)
        except IO_ERRORS as exc:
            error = translate(exc, what, "bucket")
            if isinstance(error, AccessDenied) and self.expected_owner:
                raise AccessDenied(f"{what}: access denied: it is not owned by account {self.expected_owner} "
                                   "(--expected-owner), or this identity may not use it; nothing was written",
                                   hint="check who owns the bucket (a name deleted and re-created by another "
                                        "account fails this way on purpose), or the IAM policy") from exc
            if isinstance(error, AccessDenied):
                # A HEAD answer has no body, so a wrong secret looks like a missing permission;
                # a GET on the bucket returns the real code (SignatureDoesNotMatch, ...).
                try:
                    sent_count.add("list_objects_v2")
                    self.control.list_objects_v2(Bucket=bucket, MaxKeys=0)
                except IO_ERRORS as probe:
                    error = translate(probe, what, "bucket")
            raise error from exc
        finally:
            self.control.meta.events.unregister("before-send.s3.HeadBucket", capture)
            self.control.meta.events.unregister("before-send.s3.ListObjectsV2", capture)
        headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        # A listing's answer need not name the region (moto's does not): then the region the
        # accepted request was signed for, after any redirect, is the bucket's.
        signed = re.search(r"Credential=[^/]+/\d{8}/([^/]+)/", sent[-1][1])
        region = (response.get("BucketRegion") or headers.get("x-amz-bucket-region")
                  or (signed.group(1) if signed else self.region))
        url = urllib.parse.urlsplit(sent[-1][0])
        route = BucketRoute(bucket, url.netloc, url.path.rstrip("/"), url.scheme == "https", region)
        with self._lock:
            self._routes[bucket] = route
        return route

    def _head_or_list(self, bucket: str, prefix: str, sent: Sent) -> Any:
        try:
            sent.add("head_bucket")
            return self.control.head_bucket(Bucket=bucket)
        except IO_ERRORS as exc:
            if not prefix or self.expected_owner or status_of(exc) != 403:
                raise
            try:  # s3:ListBucket narrowed to the prefix: S3 denies HeadBucket, lists the prefix
                sent.add("list_objects_v2")
                return self.control.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=0)
            except IO_ERRORS as probe:
                if status_of(probe) != 403:
                    raise exc from None
                if not isinstance(translate(probe, f"list s3://{bucket}/{prefix}", "bucket"), AccessDenied):
                    raise  # a listing's body names what a HEAD cannot: a wrong secret, an expired token
                raise AccessDenied(
                    f"bucket s3://{bucket}: access denied (403) to HeadBucket and to a listing of {prefix!r}",
                    hint=f"grant s3:ListBucket on arn:aws:s3:::{bucket}, unconditioned or with an s3:prefix "
                         f"condition that allows '{prefix}' (docs/SECURITY.md)") from probe

    def check_buckets(self, *buckets: tuple[str, ...]) -> None:
        """``check_bucket`` each (bucket, role[, prefix]) at once, once per bucket for the life of
        these clients: a task that archives many prefixes of one bucket pays for it once."""
        for t in buckets:  # before any request
            refuse_directory_bucket(t[0], t[1])
        todo = [t for t in {t[0]: t for t in buckets}.values() if t[0] not in self._routes]
        if len(todo) == 1:
            self.check_bucket(*todo[0])
        elif todo:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(len(todo), thread_name_prefix="s3arch-buckets") as pool:
                for done in [pool.submit(self.check_bucket, *t) for t in todo]:
                    done.result()

    def data_for(self, bucket: str, concurrency: int = 64) -> SourceRequests:
        """The GET plane for ``bucket`` with ``concurrency`` GETs in flight, requests routed as
        the control plane routes them, through the proxy botocore uses for that endpoint:
        plain connections (tasks/io/connections.py: one pool per endpoint and concurrency) unless
        S3ARCH_GET_PATH=crt asks for awscrt's S3 client (one per region and concurrency), which
        cannot use a proxy and is refused with one before the first GET."""
        route = self._routes.get(bucket) or self.check_bucket(bucket, "source")
        proxy = proxy_for(route.tls, route.host, self.botocore_config)
        if get_path() == "crt":
            if proxy is not None:
                raise BadArgument(f"S3ARCH_GET_PATH=crt cannot send GETs through the proxy {proxy.url} "
                                  f"configured for {route.host}: awscrt's S3 client has no proxy option",
                                  hint="unset S3ARCH_GET_PATH (the default GET path uses the proxy), or "
                                       "exempt the endpoint with NO_PROXY")
            return self._planes_made().crt(route, concurrency, self.expected_owner)
        return self._planes_made().plain(route, proxy, concurrency, self.expected_owner)

    def writes_for(self, bucket: str, prefix: str, concurrency: int) -> PlainDataPlane:
        """The plain connections that PUT small objects under ``prefix`` of ``bucket`` (an
        extract's target), ``concurrency`` at a time, through the proxy botocore uses for that
        endpoint. Plain whatever S3ARCH_GET_PATH says: the CRT client's meta-requests are no
        cheaper for a PUT than for a GET, and boto3's cost three times the CPU (issue 33)."""
        route = self._routes.get(bucket) or self.check_bucket(bucket, "destination", prefix)
        proxy = proxy_for(route.tls, route.host, self.botocore_config)
        return self._planes_made().plain(route, proxy, concurrency, self.expected_owner)

    def _planes_made(self) -> Planes:
        sent = self.store.sent  # before the lock, which ``store`` takes: the data plane counts with the control plane
        with self._lock:
            if self._planes is None:
                self._planes = Planes(self.session, self.verify, sent)
            return self._planes
