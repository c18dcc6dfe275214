"""S3's answers as the engine's typed errors (tasks/core/errors.py): the one table both planes
classify by (``error_for``: an error code and/or HTTP status, read with what was asked for), and
``translate`` for an exception of boto3, botocore, awscrt or the network. Used only at the S3
boundary (tasks/io/store.py for boto3, tasks/io/connections.py and crt.py for awscrt) and by
callers that read an answer's per-key errors (DeleteObjects).
"""

from __future__ import annotations

from typing import Literal

from s3arch.core.errors import AccessDenied, ArchivedObjectNotReadable, ArchiverError, BadArgument, BadCredentials, BucketMissing, CertificateUntrusted, ClockSkewed, ConcurrentRun, CredentialsExpired, MalformedRequest, ObjectMissing, SourceChanged, StorageClassRejected, Throttled, TransientError, UploadLost, WrongRegion


# S3's (and S3-compatible servers') answers that mean "slow down", not "broken".
THROTTLE_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException", "TooManyRequestsException",
                            "RequestLimitExceeded", "RequestThrottled", "ProvisionedThroughputExceededException"})


_TRUST_CA = ("trust its CA: AWS_CA_BUNDLE=/path/to/ca.pem (or ca_bundle in the AWS profile, or the Airflow "
             "connection's verify), or add the CA to the system trust store")

# What the CRT's TLS reports for a certificate that does not verify (s2n names the reason where
# it can; a failed negotiation is what it says otherwise, and the control plane's TLS to the same
# endpoint has passed by then). Timeouts and failures mid-stream are not here: they are faults.
_UNTRUSTED_CRT = frozenset({
    "AWS_IO_TLS_ERROR_NEGOTIATION_FAILURE", "AWS_IO_TLS_ERROR_DEFAULT_TRUST_STORE_NOT_FOUND",
    "AWS_IO_TLS_BAD_CERTIFICATE", "AWS_IO_TLS_BAD_PEER_CERTIFICATE", "AWS_IO_TLS_CERTIFICATE_EXPIRED",
    "AWS_IO_TLS_CERTIFICATE_NOT_YET_VALID", "AWS_IO_TLS_HOST_NAME_MISMATCH", "AWS_IO_TLS_INVALID_CERTIFICATE_CHAIN",
    "AWS_IO_TLS_NO_ROOT_CERTIFICATE_FOUND", "AWS_IO_TLS_PEER_CERTIFICATE_EXPIRED",
    "AWS_IO_TLS_PEER_CERTIFICATE_REVOKED", "AWS_IO_TLS_PEER_CERTIFICATE_UNKNOWN",
    "AWS_IO_TLS_UNKNOWN_ROOT_CERTIFICATE"})


def untrusted_certificate(what: str, endpoint: str, detail: str) -> "CertificateUntrusted":
    """The permanent error for an endpoint whose certificate does not verify: a retry fails
    the same way, so it names the endpoint and how to trust it (exit 2)."""
    return CertificateUntrusted(f"{what}: the TLS certificate of {endpoint} does not verify ({detail})",
                                hint=_TRUST_CA)


def tls_failure(name: str, what: str, endpoint: str) -> "CertificateUntrusted | None":
    """``untrusted_certificate`` if the CRT error ``name`` says the certificate did not verify."""
    return untrusted_certificate(what, endpoint, name) if name in _UNTRUSTED_CRT else None


# What a 404 or 412 means depends on what was asked for, never on the words in a name:
# a missing key of a listed source object means the source changed under the run, a
# missing key of an archive means the archive is gone, and so on.
Subject = Literal["bucket", "source", "object", "upload", "commit"]

_RETRY_LATER = "retried with backoff and still failing; try again later"

# code -> (error class, what happened, how to fix it). One table for both planes.
_BY_CODE: dict[str, tuple[type[ArchiverError], str, str | None]] = {
    "NoSuchBucket": (BucketMissing, "bucket does not exist",
                     "check the bucket name and the account/endpoint you point at"),
    "NoSuchUpload": (UploadLost, "the multipart upload was aborted under this run",
                     "another run of this prefix took it over, or a lifecycle rule aborted it; "
                     "the next try starts clean"),
    "InvalidObjectState": (ArchivedObjectNotReadable,
                           "object is in an archive storage class and not restored",
                           "restore it first: s3arch restore ARCHIVE --wait (docs/RESTORE.md), then retry"),
    "InvalidStorageClass": (StorageClassRejected, "the endpoint rejects this storage class",
                            "pick one it supports with --storage-class (MinIO accepts only STANDARD)"),
    "ExpiredToken": (CredentialsExpired, "temporary credentials expired",
                     "retried with fresh credentials; if it persists, check the role's session duration"),
    "TokenRefreshRequired": (CredentialsExpired, "temporary credentials need a refresh",
                             "retried with fresh credentials"),
    "RequestTimeTooSkewed": (ClockSkewed, "this machine's clock differs too much from S3's",
                             "synchronise the clock (NTP/chrony) and retry"),
    "InvalidAccessKeyId": (BadCredentials, "credentials rejected (InvalidAccessKeyId)",
                           "check the access key, secret and session token in use"),
    "SignatureDoesNotMatch": (BadCredentials, "credentials rejected (SignatureDoesNotMatch)",
                              "check the access key, secret and session token in use"),
    "InvalidToken": (BadCredentials, "credentials rejected (InvalidToken)",
                     "check the access key, secret and session token in use"),
    "AccessDenied": (AccessDenied, "access denied (AccessDenied)",
                     "grant the caller the needed s3: permission on this bucket"),
    "AllAccessDisabled": (AccessDenied, "access denied (AllAccessDisabled)",
                          "grant the caller the needed s3: permission on this bucket"),
    "AccountProblem": (AccessDenied, "access denied (AccountProblem)",
                       "grant the caller the needed s3: permission on this bucket"),
    "PermanentRedirect": (WrongRegion, "bucket is in another region (PermanentRedirect)",
                          "set AWS_REGION / the connection's region_name to the bucket's region"),
    "AuthorizationHeaderMalformed": (WrongRegion, "bucket is in another region (AuthorizationHeaderMalformed)",
                                     "set AWS_REGION / the connection's region_name to the bucket's region"),
    "IllegalLocationConstraintException": (WrongRegion, "bucket is in another region",
                                           "set AWS_REGION / the connection's region_name to the bucket's region"),
}
for _code in ("InvalidArgument", "InvalidRequest", "InvalidBucketName", "KeyTooLongError",
              "EntityTooLarge", "EntityTooSmall", "InvalidPart", "InvalidPartOrder", "MalformedXML",
              "NotImplemented", "KMS.NotFoundException", "KMS.DisabledException",
              "InvalidEncryptionAlgorithmError"):
    _BY_CODE[_code] = (BadArgument, _code, None)

# 400s that are faults on the way, not a request built wrong: another try can pass.
_TRANSIENT_400 = frozenset({"RequestTimeout", "IncompleteBody", "BadDigest", "XAmzContentSHA256Mismatch",
                            "InvalidDigest", "RequestTimeoutException", "SlowDown", "Throttling",
                            "ThrottlingException", "TooManyRequestsException", "InternalError"})

# Bodyless answers (HEAD) carry only a status; what it means depends on the subject.
_BY_STATUS: dict[tuple[int, str], tuple[type[ArchiverError], str, str | None]] = {
    (404, "bucket"): _BY_CODE["NoSuchBucket"],
    (404, "source"): (SourceChanged, "object vanished after it was listed; nothing was committed",
                      "re-run once writers to this prefix have finished"),
    (404, "object"): (ObjectMissing, "not found", "check the key; `s3arch ls` lists what an archive holds"),
    (404, "upload"): _BY_CODE["NoSuchUpload"],
    (404, "commit"): _BY_CODE["NoSuchUpload"],
    (412, "source"): (SourceChanged, "object changed after it was listed; nothing was committed",
                      "re-run once writers to this prefix have finished"),
    (412, "commit"): (ConcurrentRun, "another run wrote this destination while this one ran; "
                      "this run committed nothing", "re-run: it finds that run's archive and skips"),
    (403, "*"): _BY_CODE["AccessDenied"],
    (301, "*"): _BY_CODE["PermanentRedirect"],
}


def error_for(code: str, status: int | None, message: str, *, what: str,
              subject: Subject = "object") -> ArchiverError:
    """Turn an S3 answer (error code and/or HTTP status) into the engine's typed error, which
    carries the answer's ``status``."""
    error = _classify(code, status, message, what, subject)
    error.status, error.code = status, code or None
    return error


def _classify(code: str, status: int | None, message: str, what: str, subject: Subject) -> ArchiverError:
    code = code or ""
    entry = None
    if code in THROTTLE_CODES or (not code and status in (429, 503)):
        return Throttled(f"{what}: {code or status}: {message}".rstrip(": "), hint=_RETRY_LATER)
    if code == "NoSuchKey":
        entry = _BY_STATUS[(404, subject if subject != "bucket" else "object")]
    elif code == "PreconditionFailed":
        entry = _BY_STATUS.get((412, subject), _BY_STATUS[(412, "source")])
    elif code == "InvalidObjectState" and subject == "source":
        # A source the listing showed readable: INTELLIGENT_TIERING in an archive tier, which
        # no listing shows (GLACIER/DEEP_ARCHIVE sources are refused before their GET).
        entry = (ArchivedObjectNotReadable, "source object is in an archive tier (Intelligent-Tiering's "
                 "Archive or Deep Archive Access) and not restored; nothing was committed",
                 "restore the sources with S3's RestoreObject (aws s3api restore-object), or change the "
                 "bucket's Intelligent-Tiering archive configuration; `s3arch restore` restores archives, not sources")
    elif code in _BY_CODE:
        entry = _BY_CODE[code]
    elif status is not None:
        entry = _BY_STATUS.get((status, subject)) or _BY_STATUS.get((status, "*"))
        if entry is None and status == 404:
            entry = _BY_STATUS[(404, "object")]
        if entry is None and status == 412:
            entry = _BY_STATUS[(412, "source")]
    if entry is None and status == 400 and code not in _TRANSIENT_400:
        return MalformedRequest(f"{what}: S3 refused the request as malformed (400 {code or 'Bad Request'}"
                                f"{': ' + message if message else ''}); retrying would send it again",
                                hint="this is a bug in s3arch: please report it with this message")
    if entry is None:
        return TransientError(f"{what}: {code or status or 'error'}: {message}".rstrip(": "),
                              hint=_RETRY_LATER)
    cls, text, hint = entry
    if cls is BadArgument:
        text = f"{code}: {message}"
    return cls(f"{what}: {text}", hint=hint)


def _io_errors() -> tuple[type[BaseException], ...]:
    from awscrt.exceptions import AwsCrtError
    from botocore.exceptions import BotoCoreError, ClientError

    return (ClientError, BotoCoreError, AwsCrtError, OSError)


# What I/O raises: S3's answers (botocore), the clients' own faults (botocore, the CRT) and the
# network (OSError). Only these are translated into typed errors, at the call that made them;
# anything else is a bug in this code, and propagates as itself: permanent, with its traceback.
IO_ERRORS: tuple[type[BaseException], ...] = _io_errors()


def translate(exc: BaseException, what: str, subject: Subject = "object") -> ArchiverError:
    """An exception from S3 or the network (``IO_ERRORS``) as a typed error. Anything else
    is re-raised as it is: a KeyError in the engine must never read as "try again"."""
    from awscrt.exceptions import AwsCrtError
    from botocore.exceptions import ClientError, NoCredentialsError, ParamValidationError

    if isinstance(exc, ArchiverError):
        return exc
    if isinstance(exc, ParamValidationError):
        raise exc  # a request this code built wrong, refused before it was sent: a bug, never "try again"
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = err.get("Code", "")
        if code.isdigit():  # HEAD responses carry no body, only the status
            status, code = int(code), ""
        # Where S3 says which region the bucket is in (the header, or <Region> of a 400), the
        # message names it: the one thing the user has to copy into the configuration.
        region = (exc.response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("x-amz-bucket-region")
                  or err.get("Region"))
        redirected = _BY_CODE.get(code, (None,))[0] is WrongRegion or (not code and status in (301, 400))
        if region and redirected:  # without a code: a HEAD of a bucket in another region
            return WrongRegion(f"{what}: bucket is in region {region}{f' ({code})' if code else ''}",
                               hint=f"set AWS_REGION (or the profile's region, the Airflow connection's "
                                    f"region_name) to {region}; an endpoint URL, if set, must serve {region}")
        return error_for(code, status, err.get("Message", ""), what=what, subject=subject)
    from botocore.exceptions import SSLError

    if isinstance(exc, SSLError) and "CERTIFICATE_VERIFY_FAILED" in str(exc):
        return untrusted_certificate(what, getattr(exc, "kwargs", {}).get("endpoint_url") or "the endpoint", str(exc))
    if isinstance(exc, AwsCrtError):
        untrusted = tls_failure(exc.name, what, "the endpoint")
        if untrusted is not None:
            return untrusted
    if isinstance(exc, NoCredentialsError):
        return BadCredentials(f"{what}: no AWS credentials found",
                              hint="set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, or the Airflow connection")
    if isinstance(exc, IO_ERRORS):
        name = exc.name if isinstance(exc, AwsCrtError) else type(exc).__name__
        return TransientError(f"{what}: {name}: {exc}", hint=_RETRY_LATER)
    raise exc


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of a botocore ClientError or of a typed error made from an answer, else None."""
    if isinstance(exc, ArchiverError):
        return exc.status
    response = getattr(exc, "response", None) or {}
    return response.get("ResponseMetadata", {}).get("HTTPStatusCode")


def missing_key_denied(what: str, bucket: str, key: str, listing_denied: bool = True) -> AccessDenied:
    """403 for a HEAD/GET of a key that may not exist: S3 answers 403, not 404, for a missing
    key unless the caller may s3:ListBucket it (an s3:ListBucket narrowed by an s3:prefix
    condition does not count: S3 checks it without a prefix)."""
    folder = key.rsplit("/", 1)[0] + "/" if "/" in key else ""
    return AccessDenied(
        f"{what}: access denied (403) for s3://{bucket}/{key}, a key that may not exist; S3 answers 403 rather "
        "than 404 for a missing key to a caller without s3:ListBucket"
        + (", and listing it (ListObjectsV2, prefix the key) was denied too" if listing_denied else ""),
        hint=f"grant s3:ListBucket on arn:aws:s3:::{bucket} (an s3:prefix condition must allow "
             f"'{folder}*'), and s3:GetObject on the key (docs/SECURITY.md)")
