"""S3 access: boto3 for the control plane, the AWS Common Runtime for source GETs (plain
``awscrt.http`` connections, tasks/io/connections.py; its S3 client with S3ARCH_GET_PATH=crt).

Both planes take credentials, region and endpoint from one boto3 session, so the Airflow
layer (S3Hook's session), the CLI (standard AWS configuration) and the tests (a MinIO on
loopback) all drive the same code. The data plane sends each GET to exactly the host, path
style and region that botocore resolved for the bucket (FIPS, China, dual-stack and VPC
endpoints included), read once from a HeadBucket. Errors from either plane are classified
by ``errors.error_for``.
"""

from __future__ import annotations

import logging
import re
import threading
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import boto3
from botocore.config import Config

from s3arch.core import backoff
from s3arch.io.connections import ConnectionPool, PlainDataPlane, Signer, get_path, proxy_for
from s3arch.io.dataplane import BucketRoute, SourceRequests, parse_error_body
from s3arch.core.errors import (IO_ERRORS, AccessDenied, ArchiverError, BadCredentials, Subject, error_for, missing_key_denied,
                     status_of, translate)
from s3arch.io.listed import install_page_parser, key_listed

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client  # typing only (requirements-test.txt)


T = TypeVar("T")
_log = logging.getLogger(__name__)

DIRECTORY_BUCKET_SUFFIX = "--x-s3"  # S3 Express One Zone directory buckets: BUCKET--AZID--x-s3


def refuse_directory_bucket(bucket: str, role: str) -> None:
    """S3 Express One Zone directory buckets are refused until supported: their listings are in
    no key order and take no StartAfter (ranges, segments and the deletion merge assume both),
    and they use a session auth the data plane is not built with."""
    if bucket.endswith(DIRECTORY_BUCKET_SUFFIX):
        from s3arch.core.errors import BadArgument

        raise BadArgument(f"{role} bucket s3://{bucket} is an S3 Express directory bucket (its name ends in "
                          f"{DIRECTORY_BUCKET_SUFFIX}); directory buckets are not supported yet",
                          hint="use a general purpose bucket for the source and the destination "
                               "(copy the prefix to one first if it lives in a directory bucket)")


@dataclass
class S3Clients:
    """The two planes over one session."""

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
    _planes: dict = field(default_factory=dict)
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
        session = session or boto3.Session()
        region = session.region_name or "us-east-1"
        config = Config(retries={"mode": "standard", "max_attempts": max_attempts},
                        max_pool_connections=max_pool_connections,
                        connect_timeout=10, read_timeout=read_timeout)
        if botocore_config is not None:
            config = config.merge(botocore_config)
        control = session.client("s3", endpoint_url=endpoint_url, region_name=region, verify=verify,
                                 config=_with_s3_options(config, path_style=bool(endpoint_url)))
        # boto3 also reads AWS_ENDPOINT_URL(_S3) and the profile's endpoint_url; a non-AWS
        # endpoint found there (MinIO, Ceph) wants path-style requests like an explicit one.
        resolved = control.meta.endpoint_url
        custom = endpoint_url or (None if re.search(r"\.amazonaws\.com(\.cn)?/?$", resolved) else resolved)
        if custom and not endpoint_url:
            control = session.client("s3", endpoint_url=custom, region_name=region, verify=verify,
                                     config=_with_s3_options(config, path_style=True))
        _keep_timestamps_as_text(control)
        _send_bodies_at_once(control)
        _retry_expired_tokens(control)
        install_page_parser(control)
        from s3arch.core.config import resolve_throttle_budget
        from s3arch.io.throttling import install as wait_out_throttling

        # listing pages, part uploads: throttling waited out and counted
        wait_out_throttling(control, resolve_throttle_budget(throttle_budget))
        _fail_fast_on_untrusted_certificate(control)
        if verify is None:  # AWS_CA_BUNDLE or the profile's ca_bundle, as botocore reads them: the CRT plane too
            verify = session._session.get_config_variable("ca_bundle") or None
        clients = cls(session=session, control=control, endpoint_url=custom, region=region, verify=verify,
                      botocore_config=botocore_config)
        if expected_owner is not None:
            clients.expected_owner = clients._own_account() if expected_owner == "self" else expected_owner
            control.meta.events.register("before-parameter-build.s3", clients._add_expected_owner)
        return clients

    def _add_expected_owner(self, params, model, **_) -> None:
        if self.expected_owner and "ExpectedBucketOwner" in model.input_shape.members:
            params.setdefault("ExpectedBucketOwner", self.expected_owner)

    def _own_account(self) -> str:
        try:
            return self.session.client("sts", region_name=self.region, verify=self.verify,
                                       config=self.botocore_config).get_caller_identity()["Account"]
        except IO_ERRORS as exc:
            raise translate(exc, "find the caller's account for --expected-owner self (sts:GetCallerIdentity)",
                            "bucket") from exc

    @property
    def single_attempt(self):
        """The control client without botocore's retries, for calls whose failure should be
        seen at once: S3 answers "Expedited capacity unavailable" with a 503 that retrying for
        half a minute does not cure, when falling back to another tier would."""
        with self._lock:
            if "single" not in self._planes:
                # From the endpoint as configured (None on AWS), never control.meta.endpoint_url: a
                # resolved AWS endpoint passed back in is a custom one, whose host botocore's region
                # redirect keeps, so a bucket in another region answered 301 again.
                self._planes["single"] = self.session.client(
                    "s3", endpoint_url=self.endpoint_url, region_name=self.region, verify=self.verify,
                    config=self.control.meta.config.merge(Config(retries={"mode": "standard",
                                                                          "total_max_attempts": 1})))
                if self.expected_owner:
                    self._planes["single"].meta.events.register("before-parameter-build.s3", self._add_expected_owner)
            return self._planes["single"]

    def check_bucket(self, bucket: str, role: str, prefix: str = "") -> BucketRoute:
        """HeadBucket ``bucket``: fail with a typed error naming it, else remember where
        botocore sent the request and which region answered, for the data plane. HeadBucket
        needs s3:ListBucket without an s3:prefix condition; where it is denied, a listing of
        ``prefix`` (if given) that passes proves the bucket usable instead."""
        what = f"{role} bucket s3://{bucket}"
        refuse_directory_bucket(bucket, role)
        sent: list[tuple[str, str]] = []

        def capture(request, **_):
            # Other threads may check other buckets at the same time: only this bucket's request.
            url = urllib.parse.urlsplit(request.url)
            if url.path.rstrip("/") == f"/{bucket}" or url.netloc.startswith(f"{bucket}."):
                sent.append((request.url, str(request.headers.get("Authorization") or "")))

        self.control.meta.events.register("before-send.s3.HeadBucket", capture)
        self.control.meta.events.register("before-send.s3.ListObjectsV2", capture)
        try:
            response = self._head_or_list(bucket, prefix)
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

    def _head_or_list(self, bucket: str, prefix: str) -> Any:
        try:
            return self.control.head_bucket(Bucket=bucket)
        except IO_ERRORS as exc:
            if not prefix or self.expected_owner or status_of(exc) != 403:
                raise
            try:  # s3:ListBucket narrowed to the prefix: S3 denies HeadBucket, lists the prefix
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
                from s3arch.core.errors import BadArgument

                raise BadArgument(f"S3ARCH_GET_PATH=crt cannot send GETs through the proxy {proxy.url} "
                                  f"configured for {route.host}: awscrt's S3 client has no proxy option",
                                  hint="unset S3ARCH_GET_PATH (the default GET path uses the proxy), or "
                                       "exempt the endpoint with NO_PROXY")
            plane = (route.region, route.tls, concurrency)
            with self._lock:
                client = self._planes.get(plane)
                if client is None:
                    client = self._planes[plane] = _crt_client(self.session, route, self.verify, concurrency)
            return DataPlane(client, route, self.expected_owner)
        return self._plain_plane(route, proxy, concurrency)

    def writes_for(self, bucket: str, prefix: str, concurrency: int) -> PlainDataPlane:
        """The plain connections that PUT small objects under ``prefix`` of ``bucket`` (an
        extract's target), ``concurrency`` at a time, through the proxy botocore uses for that
        endpoint. Plain whatever S3ARCH_GET_PATH says: the CRT client's meta-requests are no
        cheaper for a PUT than for a GET, and boto3's cost three times the CPU (issue 33)."""
        route = self._routes.get(bucket) or self.check_bucket(bucket, "destination", prefix)
        return self._plain_plane(route, proxy_for(route.tls, route.host, self.botocore_config), concurrency)

    def _plain_plane(self, route: BucketRoute, proxy, concurrency: int) -> PlainDataPlane:
        with self._lock:
            pool_key = ("pool", route.host, route.tls, proxy, concurrency)
            pool = self._planes.get(pool_key)
            if pool is None:
                pool = self._planes[pool_key] = _connection_pool(self._plain_bootstrap(), route, self.verify,
                                                                 proxy, concurrency)
            signer = self._planes.get(("signer", route.region))
            if signer is None:
                signer = self._planes[("signer", route.region)] = Signer(_credentials_provider(self.session),
                                                                         route.region)
        return PlainDataPlane(pool, signer, route, self.expected_owner)

    def _plain_bootstrap(self):
        """The event loop every plain connection pool of these clients runs on (called locked)."""
        bootstrap = self._planes.get("bootstrap")
        if bootstrap is None:
            from awscrt import io

            # One thread, as the CRT client's: a second only contends for the GIL and the cores.
            elg = io.EventLoopGroup(1)
            bootstrap = self._planes["bootstrap"] = io.ClientBootstrap(elg, io.DefaultHostResolver(elg))
        return bootstrap


def _with_s3_options(config: Config, path_style: bool) -> Config:
    """``config`` with the engine's S3 options added to the ones it already has.

    Payload signing is off: botocore would otherwise SHA-256 every part body on plain-HTTP
    endpoints (over HTTPS it already sends UNSIGNED-PAYLOAD), a fifth of the client CPU on
    large objects. Nothing goes unprotected: every part carries its CRC32C, which S3 checks,
    and every other body botocore's default checksum (CRC32) or ours (SHA-256 on extract).
    """
    options = {"addressing_style": "path" if path_style else "auto", "payload_signing_enabled": False}
    options.update(config.s3 or {})  # the caller's (an Airflow connection's) choices win
    return config.merge(Config(s3=options))


def _send_bodies_at_once(client) -> None:
    """No ``Expect: 100-continue`` on uploads: botocore asks for it before every body it can
    read() (our parts, a small archive's single PUT), which costs a round trip per request
    (measured: a one-object prefix made 11 sequential round trips through a 200 ms proxy, 8
    without it). What it saves, not sending a body the server will refuse, is at most one
    part here."""
    from botocore.handlers import add_expect_header

    client.meta.events.unregister("before-call.s3", add_expect_header)


def _retry_expired_tokens(client) -> None:
    """ExpiredToken and TokenRefreshRequired retried (``backoff.EXPIRED_TOKEN``): botocore
    signs each attempt anew with the credentials it has refreshed meanwhile; its standard retry
    mode takes them as final. A token that outlives its announced expiry, or a request signed
    just before a refresh, then costs a pause, not the run."""

    def retry(response=None, attempts: int = 1, **_):
        if response is None or not backoff.EXPIRED_TOKEN.allows(attempts):
            return None
        if response[1].get("Error", {}).get("Code") in ("ExpiredToken", "TokenRefreshRequired"):
            return backoff.EXPIRED_TOKEN.pause(attempts)
        return None

    client.meta.events.register("needs-retry.s3", retry)


def _keep_timestamps_as_text(client) -> None:
    """Make this client return timestamps as S3's ISO 8601 text instead of datetimes.

    botocore parses every LastModified with dateutil: listing cost 125 us of CPU per key
    here, 43 us without it. The engine parses the few timestamps it needs with
    ``datetime.fromisoformat`` (``parse_s3_time``). botocore has no public switch for one
    client, so the client's own parser factory is replaced (the session's would change every
    client of a caller's session). If that internal attribute moves, listing is slower, not
    wrong: that is logged as a warning, and tests/test_botocore_hooks.py fails.
    """
    import botocore
    from botocore.parsers import ResponseParserFactory

    endpoint = getattr(client, "_endpoint", None)
    if endpoint is None or not hasattr(endpoint, "_response_parser_factory"):
        _log.warning("botocore %s has no client._endpoint._response_parser_factory: S3 timestamps are parsed "
                     "with dateutil again, which triples a listing's CPU per key; this botocore moved what "
                     "s3arch's parser hook sets", botocore.__version__)
        return
    factory = ResponseParserFactory()
    factory.set_parser_defaults(timestamp_parser=str)
    endpoint._response_parser_factory = factory


def _crt_client(session: boto3.Session, route: BucketRoute, verify: bool | str | None, concurrency: int):
    from awscrt import io, s3

    # One event-loop thread: measured 0.40 ms/object against 0.70 with two, because
    # the second thread only contends with the GIL and the server for the same cores.
    elg = io.EventLoopGroup(1)
    bootstrap = io.ClientBootstrap(elg, io.DefaultHostResolver(elg))
    tls = s3.S3RequestTlsMode.ENABLED if route.tls else s3.S3RequestTlsMode.DISABLED
    context = _crt_tls_context(io, verify) if route.tls else None
    return s3.S3Client(bootstrap=bootstrap, region=route.region,
                       credential_provider=_credentials_provider(session),
                       tls_mode=tls, tls_connection_options=context.new_connection_options() if context else None,
                       throughput_target_gbps=crt_throughput_target(concurrency), part_size=1 << 20,
                       retry_config=crt_retry_config(s3, io))


def crt_retry_config(s3, io):
    """The CRT client's own retries (``backoff.CRT``), with a token bucket too large to drain. The default bucket (500 tokens, 5 a retry, shared
    by every request to the host) was empty within a second of S3 answering SlowDown to 64
    GETs in flight, and every request after that failed at once: the run gave up after 1 s.
    Throttling that outlasts these retries is the fetcher's to wait out (tasks/io/fetching.py:
    growing backoff within a time budget, fewer requests in flight)."""
    policy = backoff.CRT
    return s3.S3RetryConfig(max_retries=policy.tries - 1, backoff_scale_factor_ms=int(policy.base * 1000),
                            max_backoff_secs=int(policy.cap), jitter_mode=io.ExponentialBackoffJitterMode.FULL,
                            initial_bucket_capacity=1 << 30)


def _fail_fast_on_untrusted_certificate(client) -> None:
    """A certificate that does not verify will not verify on the next try: botocore's retries
    (ConnectionError, of which SSLError is one) are stopped for it, and ``translate`` makes it a
    permanent error naming the endpoint and how to trust it."""
    from botocore.exceptions import SSLError

    def stop(caught_exception=None, **_):
        if isinstance(caught_exception, SSLError) and "CERTIFICATE_VERIFY_FAILED" in str(caught_exception):
            raise caught_exception

    client.meta.events.register_first("needs-retry.s3", stop)


def crt_throughput_target(concurrency: int) -> float:
    """The CRT client's throughput target for ``concurrency`` small GETs in flight.

    The CRT client opens connections in proportion to its throughput target, not to the
    requests it is given: at 10 Gbps a few dozen, and with 40 ms per round trip (real S3, here
    through toxiproxy) every GET beyond them queued inside the client for ~240 ms; 440 obj/s
    where the same client reached 1,200 with the target at 100 Gbps (bench/README.md,
    `latency`). Connections are only opened for requests in flight, so a high target costs
    nothing when the server is near.
    """
    return max(10.0, 1.6 * concurrency)


def _crt_tls_context(io, verify: bool | str | None, *, default: bool = False):
    """boto3's ``verify`` as a CRT TLS context: False skips peer verification, a path is the
    CA bundle to trust; None keeps the system's trust store (None is returned for it unless
    ``default``: the CRT S3 client builds that one itself)."""
    if verify in (None, True) and not default:
        return None
    options = io.TlsContextOptions()
    if verify is False:
        options.verify_peer = False
    elif verify not in (None, True):
        options.override_default_trust_store_from_path(ca_filepath=str(verify))
    return io.ClientTlsContext(options)


def _connection_pool(bootstrap, route: BucketRoute, verify: bool | str | None, proxy, concurrency: int):
    """The plain path's connections to ``route``'s endpoint, one per GET in flight."""
    from awscrt import io

    url = urllib.parse.urlsplit(f"{'https' if route.tls else 'http'}://{route.host}")
    context = _crt_tls_context(io, verify, default=True) if route.tls else None
    return ConnectionPool(bootstrap, url.hostname or route.host, url.port or (443 if route.tls else 80), context,
                          proxy, concurrency)


class DataPlane(SourceRequests):
    """GETs of one bucket through awscrt's S3 client (meta-requests): S3ARCH_GET_PATH=crt."""

    def __init__(self, client, route: BucketRoute, expected_owner: str | None = None):
        from awscrt import http, s3

        self._s3 = s3
        self._http = http
        self._client = client
        self.route = route
        self._owner = [("x-amz-expected-bucket-owner", expected_owner)] if expected_owner else []

    def _send(self, method: str, operation: str, key: str, query: str, headers: list[tuple[str, str]],
              on_done: Callable[[ArchiverError | None], None], *, on_body=None, on_headers=None):
        from s3arch.core.errors import tls_failure

        request = self._http.HttpRequest(method, self._path(key, query),
                                         self._http.HttpHeaders([("Host", self.route.host)] + self._owner + headers))
        what = self._what(operation, key)

        def done(error, status_code=None, error_body=None, **_):
            if error is None:
                on_done(None)
                return
            code, message = parse_error_body(error_body)
            if not code and getattr(error, "name", "") == "AWS_ERROR_S3_SLOW_DOWN":
                code = "SlowDown"  # CRT's retries ended without the answer's status or body
            untrusted = None if status_code else tls_failure(getattr(error, "name", ""), what, self.endpoint)
            on_done(untrusted or error_for(code, status_code, message or str(error), what=what, subject="source"))

        def headers_received(status_code, headers, **_):
            if on_headers is not None and 200 <= status_code < 300:
                on_headers(headers)

        return self._client.make_request(
            type=self._s3.S3RequestType.DEFAULT, operation_name=operation, request=request,
            on_headers=headers_received,
            on_body=(lambda chunk, offset, **_: on_body(chunk)) if on_body else None, on_done=done)


def _credentials_provider(session: boto3.Session):
    """The session's credentials for the CRT signer (both GET paths)."""
    from awscrt import auth

    creds = session.get_credentials()
    if creds is None:
        raise BadCredentials("no AWS credentials found",
                             hint="set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, or the Airflow connection")
    return _crt_credentials_provider(auth, creds)


def _crt_credentials_provider(auth, creds):
    """CRT signs every GET and asks the provider each time: static keys are handed over once;
    refreshable ones (assumed roles, instance profiles) through a delegate that rebuilds the
    CRT object only when botocore's frozen credentials change."""
    from botocore.credentials import Credentials

    if type(creds) is Credentials:
        return auth.AwsCredentialsProvider.new_static(creds.access_key, creds.secret_key, creds.token)
    cache: dict = {}

    def current_credentials():
        frozen = tuple(creds.get_frozen_credentials())
        if cache.get("frozen") != frozen:
            cache["crt"] = auth.AwsCredentials(*frozen)
            cache["frozen"] = frozen
        return cache["crt"]

    return auth.AwsCredentialsProvider.new_delegate(current_credentials)


# -- Response bodies: every streamed read of an object goes through here -------------------
#
# A GET's answer is classified where the call is made (``translate``); its body arrives later,
# and a connection reset, a read timeout or a short body in the middle of it is a network
# fault like any other. botocore raises those as ResponseStreamingError, ReadTimeoutError or
# IncompleteReadError (and a checksum mismatch as FlexibleChecksumError); urllib3 and the
# socket may let ProtocolError, ReadTimeoutError or ConnectionResetError through. Every one is
# retryable, and a retry is cheap: the read resumes with a ranged GET from the first byte it
# lacks, pinned to the ETag of the first answer, so the bytes joined are one object's.

# Pauses between attempts of a body read that made no progress: ``backoff.BODY_READ``.


def _body_fault_types() -> tuple[type[BaseException], ...]:
    import http.client

    import urllib3.exceptions
    from botocore.exceptions import BotoCoreError

    return (BotoCoreError, urllib3.exceptions.HTTPError, http.client.HTTPException, OSError)


BODY_FAULTS: tuple[type[BaseException], ...] = _body_fault_types()


def body_fault(exc: BaseException, what: str, read: int, expected: int | None) -> ArchiverError:
    """A fault while reading a response body (``BODY_FAULTS``) as the retryable error that
    names what was read and how far it got. Anything else is ours and is re-raised."""
    from s3arch.core.errors import TransientError

    if isinstance(exc, ArchiverError):
        return exc
    if not isinstance(exc, BODY_FAULTS):
        raise exc
    of = f" of {expected:,}" if expected is not None else ""
    return TransientError(f"{what}: the connection failed while reading the body, {read:,}{of} bytes read "
                          f"({type(exc).__name__}: {exc})", hint="retried with backoff and still failing; "
                                                                  "try again later")


def _pause(attempt: int) -> None:
    import time

    time.sleep(backoff.BODY_READ.pause(attempt))


def read_object(control, bucket: str, key: str, what: str, *, missing_ok: bool = False, subject="object",
                attempts: int = backoff.BODY_READ.tries, **get_args) -> dict | None:
    """One GET of a small object (or range) read whole: the response with ``Body`` replaced by
    its bytes, or None for a 404 when ``missing_ok``. A body cut short is read again (the whole
    GET, pinned to the first answer's ETag) after a pause; other failures as ``translate`` types
    them."""
    failures = 0
    while True:
        try:
            response = control.get_object(Bucket=bucket, Key=key, **get_args)
        except IO_ERRORS as exc:
            status = status_of(exc)
            if status == 404 and missing_ok:
                return None
            if status == 403 and missing_ok:  # 404 to a caller with s3:ListBucket on it, else 403
                if not key_listed(control, bucket, key, what):
                    return None
            if status == 412 and failures:
                raise _changed(what) from exc
            raise translate(exc, what, subject) from exc
        body = response["Body"]
        try:
            data = body.read()
        except BaseException as exc:
            error = body_fault(exc, what, 0, response.get("ContentLength"))
            body.close()
            failures += 1
            if failures >= attempts:
                raise error from exc
            if response.get("ETag"):
                get_args = {**get_args, "IfMatch": response["ETag"]}
            _pause(failures)
            continue
        return {**response, "Body": data}


def none_if_missing(call: Callable[[], T], what: str, subject: Subject = "object", *, control=None,
                    bucket: str | None = None, key: str | None = None) -> T | None:
    """``call()``'s answer, or None if S3 answers 404 (a HEAD or GET of something that may not
    exist); any other I/O failure as a typed error (``translate``). With ``control``, ``bucket``
    and ``key``, a 403 is told apart by a LIST of the key (``listed.key_listed``): a missing key
    is None, as for a caller whose s3:ListBucket is narrowed by a prefix condition."""
    try:
        return call()
    except IO_ERRORS as exc:
        status = status_of(exc)
        if status == 404:
            return None
        if status == 403 and bucket is not None and key is not None:
            if control is not None:
                if not key_listed(control, bucket, key, what):
                    return None
                raise AccessDenied(f"{what}: access denied (s3:GetObject on s3://{bucket}/{key}, which exists)",
                                   hint="grant the caller s3:GetObject on it (docs/SECURITY.md)") from exc
            raise missing_key_denied(what, bucket, key, listing_denied=False) from exc
        raise translate(exc, what, subject) from exc


def _changed(what: str) -> ArchiverError:
    from s3arch.core.errors import TransientError

    return TransientError(f"{what}: the object was replaced while it was being read",
                          hint="another run rewrote it; try again")


def stream_object(control, bucket: str, key: str, what: str, *, start: int = 0, end: int | None = None,
                  window: int | None = None, eager: bool = False, chunk: int = 1 << 20, etag: str | None = None,
                  subject="object", attempts: int = backoff.BODY_READ.tries):
    """The bytes [start, end) of an object (to its end if ``end`` is None), in chunks of at most
    ``chunk`` bytes, read by as few GETs as faults allow.

    A fault in a body resumes with a ranged GET from the first byte not yet yielded, pinned to
    the first answer's ETag (or ``etag``), after a pause; ``attempts`` failures in a row without
    a byte of progress raise the retryable error naming the object and how far it got.
    ``window``: no GET asks for more than this many bytes; with ``eager`` each window is read
    whole before its first chunk is yielded, so no connection stays open while the caller works
    (a deletion reading its manifest between batches).
    """
    position = start
    total = end  # learned from the first answer when not given
    failures = faults = 0
    while total is None or position < total:
        stop = total
        if window is not None:
            stop = position + window if stop is None else min(stop, position + window)
        args: dict = {}
        if position or stop is not None:
            args["Range"] = f"bytes={position}-{'' if stop is None else stop - 1}"
        if etag:
            args["IfMatch"] = etag
        try:
            response = control.get_object(Bucket=bucket, Key=key, **args)
        except IO_ERRORS as exc:
            status = status_of(exc)
            if status == 416 and position == 0 and total is None:
                return  # an empty object: no byte to ask a range of
            if status == 412 and failures:
                raise _changed(what) from exc
            raise translate(exc, what, subject) from exc
        etag = etag or response.get("ETag")
        if total is None:
            content_range = response.get("ContentRange")
            total = int(content_range.rsplit("/", 1)[1]) if content_range else position + response["ContentLength"]
            if stop is None or stop > total:
                stop = total
        body = response["Body"]
        read_before = position
        try:
            if eager:
                data = body.read()
                if stop is not None and len(data) != stop - position:
                    from botocore.exceptions import IncompleteReadError

                    raise IncompleteReadError(actual_bytes=len(data), expected_bytes=stop - position)
                for i in range(0, len(data), chunk):
                    piece = data[i:i + chunk]
                    position += len(piece)
                    yield piece
            else:
                for piece in body.iter_chunks(chunk):
                    position += len(piece)
                    yield piece
                if stop is not None and position < stop:
                    from botocore.exceptions import IncompleteReadError

                    raise IncompleteReadError(actual_bytes=position - read_before, expected_bytes=stop - read_before)
        except GeneratorExit:
            body.close()
            raise
        except BaseException as exc:
            body.close()
            error = body_fault(exc, what, position - start, None if total is None else total - start)
            failures = 0 if position > read_before else failures + 1
            faults += 1
            if failures >= attempts or faults >= 4 * attempts:
                raise error from exc
            _pause(max(failures, 1))
            continue
        body.close()
        failures = 0
