"""What the engine changes in a boto3 S3 client, each for a reason its function gives: a
session of its own whose clients keep timestamps as text (``engine_session``), path-style and
unsigned payloads (``with_s3_options``), no ``Expect: 100-continue``, retried expired tokens,
a quick failure on an untrusted certificate, the expected bucket owner on every request;
``prepare`` installs them with the listing's page parser and the throttling handler on the
control client.
"""

from __future__ import annotations

import functools
import os

import boto3
import botocore.loaders
from botocore.config import Config

from s3arch.core import backoff
from s3arch.io.classify import IO_ERRORS, translate
from s3arch.io.listed import install_page_parser
from s3arch.io.throttling import install as wait_out_throttling

def prepare(control, throttle_budget: float) -> None:
    """The engine's hooks on the control client (once, as it is made)."""
    send_bodies_at_once(control)
    retry_expired_tokens(control)
    install_page_parser(control)
    wait_out_throttling(control, throttle_budget)  # listing pages, part uploads: throttling waited out and counted
    fail_fast_on_untrusted_certificate(control)


def add_expected_owner(client, owner: str) -> None:
    """``ExpectedBucketOwner`` on every request of ``client`` that takes one: S3 answers 403 for
    a bucket another account owns."""

    def add(params, model, **_) -> None:
        if "ExpectedBucketOwner" in model.input_shape.members:
            params.setdefault("ExpectedBucketOwner", owner)

    client.meta.events.register("before-parameter-build.s3", add)


def own_account(session: boto3.Session, region: str, verify, config: Config | None) -> str:
    """The caller's account (``--expected-owner self``)."""
    try:
        return session.client("sts", region_name=region, verify=verify,
                              config=config).get_caller_identity()["Account"]
    except IO_ERRORS as exc:
        raise translate(exc, "find the caller's account for --expected-owner self (sts:GetCallerIdentity)",
                        "bucket") from exc


def with_s3_options(config: Config, path_style: bool) -> Config:
    """``config`` with the engine's S3 options added to the ones it already has.

    Payload signing is off: botocore would otherwise SHA-256 every part body on plain-HTTP
    endpoints (over HTTPS it already sends UNSIGNED-PAYLOAD), a fifth of the client CPU on
    large objects. Nothing goes unprotected: every part carries its CRC32C, which S3 checks,
    and every other body botocore's default checksum (CRC32) or ours (SHA-256 on extract).
    """
    options = {"addressing_style": "path" if path_style else "auto", "payload_signing_enabled": False}
    options.update(config.s3 or {})  # the caller's (an Airflow connection's) choices win
    return config.merge(Config(s3=options))


def send_bodies_at_once(client) -> None:
    """No ``Expect: 100-continue`` on uploads: botocore asks for it before every body it can
    read() (our parts, a small archive's single PUT), which costs a round trip per request
    (measured: a one-object prefix made 11 sequential round trips through a 200 ms proxy, 8
    without it). What it saves, not sending a body the server will refuse, is at most one
    part here."""
    from botocore.handlers import add_expect_header

    client.meta.events.unregister("before-call.s3", add_expect_header)


def retry_expired_tokens(client) -> None:
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


def engine_session(session: boto3.Session) -> tuple[boto3.Session, str | None]:
    """A session of the engine's own for its clients, over the caller's profile and credentials
    (asked of ``session`` when a client needs them, so a refreshing credential stays one), and
    the CA bundle that profile or AWS_CA_BUNDLE names (None: the default trust).

    Its clients return timestamps as S3's ISO 8601 text instead of datetimes: botocore parses
    every LastModified with dateutil, which cost listing 125 us of CPU per key here, 43 us
    without it; the engine parses the few timestamps it needs with ``datetime.fromisoformat``
    (``parse_s3_time``). The parser is a component of the botocore session, which is why the
    session is the engine's own: no client of the caller's session changes.
    """
    import botocore.session
    from botocore.credentials import CredentialProvider, CredentialResolver
    from botocore.parsers import ResponseParserFactory

    class FromCaller(CredentialProvider):
        METHOD = "s3arch-caller-session"

        def load(self):
            return session.get_credentials()

    # profile_name says "default" where none was chosen, which botocore refuses without a config file.
    profile = session.profile_name if session.profile_name in session.available_profiles else None
    core = botocore.session.Session(profile=profile)
    core.register_component("data_loader", shared_loader(core.get_config_variable("data_path")))
    core.register_component("credential_provider", CredentialResolver([FromCaller()]))
    factory = ResponseParserFactory()
    factory.set_parser_defaults(timestamp_parser=str)
    core.register_component("response_parser_factory", factory)
    return boto3.Session(botocore_session=core, region_name=session.region_name), core.get_config_variable("ca_bundle")


class _OncePerPath(list):
    """Search paths that hold each folder once: boto3 appends its data folder to the loader of
    every session it wraps, and the shared loader outlives them all."""

    def append(self, path) -> None:
        if path not in self:
            super().append(path)


@functools.cache
def shared_loader(data_path: str | None) -> botocore.loaders.Loader:
    """One botocore data loader per process (per AWS_DATA_PATH) for every engine session: it
    parses S3's service model (0.07 s of CPU, over 1 MB of JSON) once, not once per set of
    clients (each task, restore and catalog job makes its own), and a Celery worker that
    imported ``s3arch_airflow.preload`` has it parsed before it forks the task processes."""
    paths = [os.path.expanduser(p) for p in data_path.split(os.pathsep)] if data_path else []
    return botocore.loaders.Loader(extra_search_paths=_OncePerPath(paths))


def preload_s3_model() -> None:
    """Parse what an S3 client is made from into the shared loader: a client is made, with
    placeholder keys so that no credential chain is asked, and no request is sent."""
    placeholder = boto3.Session(aws_access_key_id="preload", aws_secret_access_key="preload", region_name="us-east-1")
    engine_session(placeholder)[0].client("s3")


def fail_fast_on_untrusted_certificate(client) -> None:
    """A certificate that does not verify will not verify on the next try: botocore's retries
    (ConnectionError, of which SSLError is one) are stopped for it, and ``translate`` makes it a
    permanent error naming the endpoint and how to trust it."""
    from botocore.exceptions import SSLError

    def stop(caught_exception=None, **_):
        if isinstance(caught_exception, SSLError) and "CERTIFICATE_VERIFY_FAILED" in str(caught_exception):
            raise caught_exception

    client.meta.events.register_first("needs-retry.s3", stop)
