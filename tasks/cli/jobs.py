"""The commands of a job of the jobs file (docs/JOBS.md): `s3arch plan` and `s3arch scrub`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from s3arch.core.config import S3Url
from s3arch.core.errors import outcome
from s3arch.core.progress import human_bytes


def jobs_file(args) -> Path:
    import os

    return Path(args.jobs_file or os.environ.get("S3ARCH_JOBS_FILE") or "jobs.yaml")


def job_named(jobs: dict, name: str):
    if name not in jobs:
        from s3arch.core.errors import BadArgument

        raise BadArgument(f"no job {name!r} in the jobs file", hint=f"its jobs: {', '.join(sorted(jobs))}")
    return jobs[name]


def plan_days(args, clients) -> int:
    from s3arch.ops.inventory.planning import plan_from_inventory
    from s3arch.ops.jobs import check_inventory_location, load_jobs
    from s3arch.ops.sizing import plan_from_listing

    job = job_named(load_jobs(jobs_file(args)), args.job)
    location = check_inventory_location(S3Url.parse(args.inventory)) if args.inventory else None
    if location is None and job.inventory is None:
        planned = plan_from_listing(job, clients.store, date_from=args.date_from, date_to=args.date_to)
    else:
        planned = plan_from_inventory(job, clients.store, date_from=args.date_from, date_to=args.date_to,
                                      location=location, max_age_days=args.inventory_max_age_days)
    if args.json:
        print(json.dumps(planned))
    else:
        for d in planned["days"]:
            size = (f"{d['objects']:>12,} objects  {human_bytes(d['bytes'])}" if d["objects"] is not None
                    else "  after the report: sized when it is listed")
            print(f"{d['day']}  {d['prefix']}  {size}")
        totals = f"{len(planned['days'])} day(s), {planned['objects']:,} objects, {human_bytes(planned['bytes'])}"
        if planned["source"] == "listing":
            listing = planned["listing"]
            print(f"{totals}, from a listing of each day of s3://{listing['bucket']}/ (no inventory: "
                  f"{listing['days']:,} day(s) listed, {listing['empty']:,} with no objects; "
                  f"{listing['requests']:,} LIST requests in {listing['seconds']:.1f}s)")
        else:
            source = planned["inventory"]
            print(f"{totals}, from {source['report']} (made {source['created']}; {source['rows']:,} rows read in "
                  f"{source['seconds']:.1f}s)")
    return 0 if planned["days"] else 4


def scrub(args, clients) -> int:
    """What the scrub DAG runs (tasks/ops/scrub/), for a job's range of days or one of its
    archives; its lines, then exit 0 (no drift), 2 (drift: what to do is in the table and the
    message) or 3 (the checks S3 faults stopped, and nothing else: run again)."""
    from s3arch.core.errors import BadArgument
    from s3arch.core.options import whole
    from s3arch.format.manifest import layout_from_url
    from s3arch.ops.jobs import load_jobs
    from s3arch.ops.scrub import DriftFound, archive_day, parse_range, scrub, scrub_archive

    sample = whole(0, 1000)(args.sample, "--sample")
    if args.archive is None and args.job is None:
        raise BadArgument("scrub needs --job NAME (its days) or an archive's URL (that archive)")
    if args.archive is not None and (args.date_from or args.date_to):
        raise BadArgument("--date-from and --date-to scrub a range of a job's days, not one archive",
                          hint="give either the archive's URL or the dates")
    jobs = load_jobs(jobs_file(args))
    if args.archive is None:
        job = job_named(jobs, args.job)
        first, last = parse_range(job, args.date_from, args.date_to)
        result = scrub(job, clients.store, first, last, sample=sample)
    else:
        layout = layout_from_url(S3Url.parse(args.archive))
        if args.job is not None:
            job = job_named(jobs, args.job)
        else:
            found = sorted((j for j in jobs.values() if archive_day(j, layout) is not None), key=lambda j: j.name)
            if len(found) != 1:
                whose = f"jobs {', '.join(j.name for j in found)}" if found else "no job"
                raise BadArgument(f"{args.archive} is an archive of {whose} in {jobs_file(args)}",
                                  hint="name its job (--job NAME), or its jobs file (--jobs-file); `s3arch verify` "
                                       "reads any archive back whole")
            job = found[0]
        result = scrub_archive(job, clients.store, layout, sample=sample)
    error = result.failure()
    failure = outcome(error) if error is not None else None
    if args.json:
        status = "clean" if error is None else "drift" if isinstance(error, DriftFound) else "failed"
        print(json.dumps({"status": status, **result.to_dict(),
                          **({"message": failure.message, "retryable": failure.retryable} if failure else {})}))
    else:
        print(result.summary_line())
        print(result.cost_line())
        print(result.table())
    if failure is None:
        return 0
    print(f"error: {failure.message}", file=sys.stderr)
    return failure.exit_code
