"""Presets: the key layouts AWS writes its own logs in, as a job's ``prefix_template``.

``preset: cloudtrail`` (with ``filters`` and ``layout``) stands for the template AWS documents
for that service; each ``{name}`` below is a wildcard (``*``) unless ``filters`` names its
value. The job's ``source`` is the bucket and the prefix the service was told to write under
(``s3://trail-bucket/`` or ``s3://logs/access/``). docs/JOBS.md, "AWS log presets".
"""

from __future__ import annotations

import re

from s3arch.core.errors import BadArgument

# preset -> layout -> template; the first layout is the default.
PRESETS: dict[str, dict[str, str]] = {
    "cloudtrail": {
        "data": "AWSLogs/{organization}/{account}/CloudTrail/{region}/{date:%Y/%m/%d}/",
        "digest": "AWSLogs/{organization}/{account}/CloudTrail-Digest/{region}/{date:%Y/%m/%d}/",
        "account-trail": "AWSLogs/{account}/CloudTrail/{region}/{date:%Y/%m/%d}/",
        "account-trail-digest": "AWSLogs/{account}/CloudTrail-Digest/{region}/{date:%Y/%m/%d}/",
    },
    "alb": {"data": "AWSLogs/{account}/elasticloadbalancing/{region}/{date:%Y/%m/%d}/"},
    "vpc-flow-logs": {
        "plain": "AWSLogs/{account}/vpcflowlogs/{region}/{date:%Y/%m/%d}/",
        "hive": "AWSLogs/aws-account-id={account}/aws-service=vpcflowlogs/aws-region={region}/"
                "year={date:%Y/month=%m/day=%d}/",
    },
    "s3-access-logs": {
        "simple": "{date:%Y-%m-%d}-",
        "partitioned": "{account}/{region}/{bucket}/{date:%Y/%m/%d}/",
    },
    "cloudfront": {"data": "{distribution}.{date:%Y-%m-%d}-"},
    "config": {"data": "AWSLogs/{account}/Config/{region}/{date:%Y/%-m/%-d}/"},
    "waf": {"data": "AWSLogs/{account}/WAFLogs/{region}/{web_acl}/{date:%Y/%m/%d}/"},
    "firehose": {"data": "{date:%Y/%m/%d}/"},
}

_NAME = re.compile(r"\{([a-z_]+)\}")


def preset_template(job: str, preset: str, layout: str | None, filters: dict) -> tuple[str, list[str]]:
    """(``prefix_template``, the names of its wildcards in order) of a preset."""
    layouts = PRESETS.get(preset)
    if layouts is None:
        raise BadArgument(f"job {job!r}: unknown preset {preset!r}", hint=f"presets: {', '.join(PRESETS)}")
    template = layouts.get(layout or next(iter(layouts)))
    if template is None:
        raise BadArgument(f"job {job!r}: preset {preset} has no layout {layout!r}",
                          hint=f"its layouts: {', '.join(layouts)}")
    names = _NAME.findall(template)
    unknown = sorted(set(filters) - set(names))
    if unknown:
        raise BadArgument(f"job {job!r}: preset {preset} (layout {layout or next(iter(layouts))}) has no filter "
                          f"{', '.join(unknown)}", hint=f"its filters: {', '.join(names) or 'none'}")
    for name, value in filters.items():
        if not re.fullmatch(r"[^/*{}]+", str(value)):
            raise BadArgument(f"job {job!r}: filter {name}={value!r} must be one path segment's value")
    wildcards = [n for n in names if n not in filters]
    return _NAME.sub(lambda m: str(filters.get(m.group(1), "*")), template), wildcards


def with_preset(name: str, body: dict) -> dict:
    """The job with its ``preset`` (and ``layout``, ``filters``) turned into its
    ``prefix_template``, and a ``split_by`` that names a preset's wildcard turned into its number."""
    body = dict(body)
    layout, filters = body.pop("layout", None), body.pop("filters", None) or {}
    if body.get("preset") is None:
        if layout is not None or filters:
            raise BadArgument(f"job {name!r}: layout and filters go with a preset", hint="add preset: NAME")
        return body
    if "prefix_template" in body:
        raise BadArgument(f"job {name!r}: a preset makes the prefix_template", hint="keep one of the two")
    if not isinstance(filters, dict):
        raise BadArgument(f"job {name!r}: filters must be a mapping, e.g. {{account: '111122223333'}}")
    body["prefix_template"], wildcards = preset_template(name, body["preset"], layout, filters)
    if isinstance(body.get("split_by"), str):
        if body["split_by"] not in wildcards:
            raise BadArgument(f"job {name!r}: split_by {body['split_by']!r} is not a wildcard of this preset",
                              hint=f"its wildcards: {', '.join(wildcards) or 'none'}")
        body["split_by"] = wildcards.index(body["split_by"]) + 1
    return body
