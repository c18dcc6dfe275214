"""A profile's credential_process for tests: new temporary credentials from MinIO's STS
(AssumeRole, signed with the keys given) on every call, announced to expire LIFETIME + 900
seconds from now, so that botocore (which refreshes 15 minutes before the announced expiry)
refreshes them LIFETIME seconds after they were issued: an hour-long role session with its
refresh window, compressed into seconds. Each issue is appended to LOG.

    rotating_credentials.py ENDPOINT ACCESS_KEY SECRET_KEY REGION LIFETIME LOG
"""

import json
import sys
import time
from datetime import datetime, timedelta, timezone

import boto3


def main() -> None:
    endpoint, access_key, secret_key, region, lifetime, log = sys.argv[1:7]
    sts = boto3.client("sts", endpoint_url=endpoint, region_name=region,
                       aws_access_key_id=access_key, aws_secret_access_key=secret_key)
    issued = sts.assume_role(RoleArn="arn:minio:iam:::role/s3arch-test", RoleSessionName="s3arch-test",
                             DurationSeconds=3600)["Credentials"]
    expiry = datetime.now(timezone.utc) + timedelta(seconds=900 + float(lifetime))
    with open(log, "a") as out:
        out.write(f"{time.time():.3f} {issued['AccessKeyId']}\n")
    print(json.dumps({"Version": 1, "AccessKeyId": issued["AccessKeyId"], "SecretAccessKey": issued["SecretAccessKey"],
                      "SessionToken": issued["SessionToken"], "Expiration": expiry.isoformat()}))


if __name__ == "__main__":
    main()
