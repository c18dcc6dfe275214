"""The engine's S3 clients for a command: the standard AWS configuration, or --profile and
--endpoint-url."""

from __future__ import annotations


def clients_for(args):
    import boto3

    from s3arch.io.s3 import S3Clients

    return S3Clients.from_session(boto3.Session(profile_name=getattr(args, "profile", None)),
                                  getattr(args, "endpoint_url", None),
                                  throttle_budget=getattr(args, "throttle_budget", None),
                                  expected_owner=getattr(args, "expected_owner", None))
