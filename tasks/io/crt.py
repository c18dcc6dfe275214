"""The AWS Common Runtime side of the data plane: awscrt's S3 client (``DataPlane``,
S3ARCH_GET_PATH=crt), TLS and credentials for both GET paths, and ``Planes``, which makes the
costly objects both paths share once per set of clients (the plain connections themselves are
tasks/io/connections.py).
"""

from __future__ import annotations

import threading
import urllib.parse
from typing import Any, Callable

import boto3

from s3arch.core import backoff
from s3arch.core.errors import ArchiverError, BadCredentials
from s3arch.io.classify import error_for, tls_failure
from s3arch.io.connections import ConnectionPool, PlainDataPlane, Signer
from s3arch.io.proxies import Proxy
from s3arch.io.dataplane import BucketRoute, SourceRequests, parse_error_body
from s3arch.io.store import Sent


def _crt_client(session: boto3.Session, route: BucketRoute, verify: bool | str | None, concurrency: int):
    """awscrt's S3 client for ``route``'s region, ``concurrency`` GETs in flight (S3ARCH_GET_PATH=crt)."""
    from awscrt import io, s3

    # One event-loop thread: measured 0.40 ms/object against 0.70 with two, because
    # the second thread only contends with the GIL and the server for the same cores.
    elg = io.EventLoopGroup(1)
    bootstrap = io.ClientBootstrap(elg, io.DefaultHostResolver(elg))
    tls = s3.S3RequestTlsMode.ENABLED if route.tls else s3.S3RequestTlsMode.DISABLED
    context = _crt_tls_context(io, verify) if route.tls else None
    return s3.S3Client(bootstrap=bootstrap, region=route.region,
                       credential_provider=credentials_provider(session),
                       tls_mode=tls, tls_connection_options=context.new_connection_options() if context else None,
                       throughput_target_gbps=crt_throughput_target(concurrency), part_size=1 << 20,
                       retry_config=crt_retry_config(s3, io))


def crt_retry_config(s3, io):
    """The CRT client's own retries (``backoff.CRT``), with a token bucket too large to drain.
    The default bucket (500 tokens, 5 a retry, shared by every request to the host) was empty
    within a second of S3 answering SlowDown to 64 GETs in flight, and every request after that
    failed at once: the run gave up after 1 s. Throttling that outlasts these retries is the
    fetcher's to wait out (tasks/io/fetching.py: growing backoff within a time budget, fewer
    requests in flight)."""
    policy = backoff.CRT
    return s3.S3RetryConfig(max_retries=policy.tries - 1, backoff_scale_factor_ms=int(policy.base * 1000),
                            max_backoff_secs=int(policy.cap), jitter_mode=io.ExponentialBackoffJitterMode.FULL,
                            initial_bucket_capacity=1 << 30)


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
    """GETs of one bucket through awscrt's S3 client (meta-requests): S3ARCH_GET_PATH=crt. Each
    is counted once in ``sent`` (its clients' ``Sent``), the client's own retries not again."""

    def __init__(self, client, route: BucketRoute, expected_owner: str | None = None, *, sent: Sent):
        from awscrt import http, s3

        self._s3 = s3
        self._http = http
        self._client = client
        self.route = route
        self.sent = sent
        self._owner = [("x-amz-expected-bucket-owner", expected_owner)] if expected_owner else []

    def _send(self, method: str, operation: str, key: str, query: str, headers: list[tuple[str, str]],
              on_done: Callable[[ArchiverError | None], None], *, on_body=None, on_headers=None):
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


def credentials_provider(session: boto3.Session):
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


class Planes:
    """The data planes' costly objects, made once per S3Clients and shared by its planes: one
    event loop for every plain connection pool, a pool per endpoint and concurrency, a signer
    per region, and (S3ARCH_GET_PATH=crt) an awscrt S3 client per region and concurrency. Its
    planes count their requests in ``sent``, the control plane's (``S3Clients.store.sent``)."""

    def __init__(self, session: boto3.Session, verify: bool | str | None, sent: Sent):
        self._session = session
        self._verify = verify
        self._sent = sent
        self._bootstrap = None
        self._pools: dict[tuple, ConnectionPool] = {}
        self._signers: dict[str, Signer] = {}
        self._crt_clients: dict[tuple, Any] = {}
        self._lock = threading.Lock()

    def crt(self, route: BucketRoute, concurrency: int, expected_owner: str | None) -> DataPlane:
        key = (route.region, route.tls, concurrency)
        with self._lock:
            client = self._crt_clients.get(key)
            if client is None:
                client = self._crt_clients[key] = _crt_client(self._session, route, self._verify, concurrency)
        return DataPlane(client, route, expected_owner, sent=self._sent)

    def plain(self, route: BucketRoute, proxy: Proxy | None, concurrency: int,
              expected_owner: str | None) -> PlainDataPlane:
        key = (route.host, route.tls, proxy, concurrency)
        with self._lock:
            pool = self._pools.get(key)
            if pool is None:
                pool = self._pools[key] = _connection_pool(self._plain_bootstrap(), route, self._verify, proxy,
                                                           concurrency)
            signer = self._signers.get(route.region)
            if signer is None:
                signer = self._signers[route.region] = Signer(credentials_provider(self._session), route.region)
        return PlainDataPlane(pool, signer, route, expected_owner, sent=self._sent)

    def _plain_bootstrap(self):
        """The event loop every plain connection pool runs on (called locked)."""
        if self._bootstrap is None:
            from awscrt import io

            # One thread, as the CRT client's: a second only contends for the GIL and the cores.
            elg = io.EventLoopGroup(1)
            self._bootstrap = io.ClientBootstrap(elg, io.DefaultHostResolver(elg))
        return self._bootstrap
