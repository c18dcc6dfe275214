#!/usr/bin/env bash
# One-shot setup for docker-compose: migrate the DB, create the admin user, the S3
# connection (endpoint_url in its extra, for MinIO), the archive pool and the buckets.
set -euo pipefail
airflow db migrate
airflow connections delete s3_archive >/dev/null 2>&1 || true
airflow connections add s3_archive --conn-type aws \
  --conn-login "${MINIO_ROOT_USER}" --conn-password "${MINIO_ROOT_PASSWORD}" \
  --conn-extra "{\"endpoint_url\": \"http://minio:9000\", \"region_name\": \"us-east-1\"}"
airflow pools set "${S3ARCH_POOL:-s3_archive}" "${S3ARCH_POOL_SLOTS:-4}" "archive tasks, one slot per prefix"
python - <<'PY'
import os, boto3
s3 = boto3.client("s3", endpoint_url="http://minio:9000", aws_access_key_id=os.environ["MINIO_ROOT_USER"],
                  aws_secret_access_key=os.environ["MINIO_ROOT_PASSWORD"], region_name="us-east-1")
for bucket in os.environ.get("S3ARCH_BUCKETS", "app-logs log-archive").split():
    try:
        s3.create_bucket(Bucket=bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
PY
