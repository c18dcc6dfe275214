#!/usr/bin/env bash
# One-shot setup for docker-compose, run by the airflow-init service before any other Airflow
# service starts: migrate the DB, the S3 connection (endpoint_url in its extra, for MinIO), the
# archive pool, the buckets, the UI users' passwords (SimpleAuthManager reads them from
# $AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE) and a few days of sample logs for every
# job of the jobs file, ending yesterday, so the first scheduled run has a day to archive.
set -euo pipefail
airflow db migrate
airflow connections delete s3_archive >/dev/null 2>&1 || true
airflow connections add s3_archive --conn-type aws \
  --conn-login "${MINIO_ROOT_USER}" --conn-password "${MINIO_ROOT_PASSWORD}" \
  --conn-extra "{\"endpoint_url\": \"http://minio:9000\", \"region_name\": \"us-east-1\"}"
airflow pools set "${S3ARCH_POOL:-s3_archive}" "${S3ARCH_POOL_SLOTS:-4}" "archive tasks, one slot per prefix"
python - <<'PY'
import json, os, sys
from datetime import datetime, timedelta, timezone

import boto3

s3 = boto3.client("s3", endpoint_url="http://minio:9000", aws_access_key_id=os.environ["MINIO_ROOT_USER"],
                  aws_secret_access_key=os.environ["MINIO_ROOT_PASSWORD"], region_name="us-east-1")
for bucket in os.environ.get("S3ARCH_BUCKETS", "app-logs log-archive").split():
    try:
        s3.create_bucket(Bucket=bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass

# The UI's users (AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS, "name:role,..."), each with the
# password in S3ARCH_UI_PASSWORD_<NAME>; a user without one gets a generated password, printed
# in the api-server's log. Passwords already in the file are kept.
passwords_file = os.environ.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE")
if passwords_file:
    passwords = json.load(open(passwords_file)) if os.path.exists(passwords_file) else {}
    for user in filter(None, os.environ.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "").split(",")):
        name = user.split(":")[0].strip()
        given = os.environ.get(f"S3ARCH_UI_PASSWORD_{name.upper()}")
        if given and name not in passwords:
            passwords[name] = given
    with open(passwords_file, "w") as file:
        json.dump(passwords, file)
    print(f"UI users with a password: {', '.join(sorted(passwords)) or 'none'}")

# Sample logs (devtools/sample_data.py, the generator of `make airflow`): the last
# S3ARCH_SEED_DAYS days before today (UTC) under each job's source prefix; a day that already
# has objects is left as it is.
days = int(os.environ.get("S3ARCH_SEED_DAYS", "5"))
if days:
    sys.path.insert(0, os.environ.get("S3ARCH_SAMPLE_DATA_DIR", "/opt/s3arch/devtools"))
    from sample_data import seed_day

    from s3arch.ops.jobs import load_jobs

    today = datetime.now(timezone.utc).date()
    for job in load_jobs(os.environ.get("S3ARCH_JOBS_FILE", "/opt/airflow/dags/archive_jobs.yaml")).values():
        for day in (today - timedelta(days=n) for n in range(days, 0, -1)):
            prefix = job.prefix_for(day)
            if s3.list_objects_v2(Bucket=job.source.bucket, Prefix=prefix, MaxKeys=1).get("KeyCount"):
                continue
            seeded = seed_day(s3, job.source.bucket, prefix, day, files_per_hour=2, lines_per_file=60)
            print(f"seeded s3://{job.source.bucket}/{prefix}: {len(seeded)} objects")
PY
