"""One declaration per option (tasks/core/options.py): the CLI's flags, the job file's keys, the
restore DAG's trigger form and the docs' option tables are made from the table, and the
operators' parameters and template fields are checked against it."""

from __future__ import annotations

import inspect

import pytest

from helpers import ROOT

JOB = {"source": "s3://logs-bucket/", "prefix_template": "logs/{date:%Y/%m/%d}/", "destination": "s3://vault-bucket/a/"}


def _parameters(*operators) -> set[str]:
    return {name for op in operators for cls in op.__mro__ if "__init__" in vars(cls)
            for name in inspect.signature(cls.__init__).parameters}


def _help(command: str) -> str:
    from s3arch.cli import _parser

    sub = next(a for a in _parser()._actions if a.dest == "command").choices[command]
    return " ".join(sub.format_help().split())


# The restore operator's parameters that are no option: what it restores and how it waits.
RESTORE_OPERATOR_OWN = {"self", "source_bucket", "prefix", "destination", "deferrable", "kwargs"}


def restore_operator_mismatches() -> list[str]:
    """Where S3RestoreArchiveOperator differs from the option table: a restore option it does
    not take, or with another default; a parameter that is no option; a template field that is
    no templated restore option, or the reverse."""
    from s3arch_airflow.restore import S3RestoreArchiveOperator

    from s3arch.core.options import OPTIONS

    taken = {name: p.default for name, p in inspect.signature(S3RestoreArchiveOperator.__init__).parameters.items()
             if name not in RESTORE_OPERATOR_OWN}
    restore = {o.name: o for o in OPTIONS if o.operator == "restore"}
    others = {o.name: o for o in OPTIONS if o.operator != "restore"}  # the job's settings the DAG passes on
    wrong = [f"takes no {name}" for name in restore if name not in taken]
    for name, default in taken.items():
        option = restore.get(name) or others.get(name)
        if option is None:
            wrong.append(f"{name} is no option")
        elif default != option.default:
            wrong.append(f"{name} defaults to {default!r}, the table to {option.default!r}")
    fields = set(S3RestoreArchiveOperator.template_fields) - {"prefix", "aws_conn_id", "region_name", "verify"}
    wrong += [f"{name} is templated but no templated restore option"
              for name in fields - {o.name for o in restore.values() if o.templated}]
    wrong += [f"{o.name} is no template field" for o in restore.values() if o.templated and o.name not in fields]
    return wrong


def test_the_docs_option_tables_are_the_ones_the_table_generates():
    from devtools import option_tables

    jobs = (ROOT / "docs/JOBS.md").read_text()
    assert "<!-- options:settings -->" in jobs and "<!-- /options:settings -->" in jobs
    for doc in option_tables.DOCS:
        text = (ROOT / doc).read_text()
        assert option_tables.rewritten(text) == text, f"{doc}: run python -m devtools.option_tables"
    assert option_tables.main(["--check"]) == 0


def test_a_stale_doc_table_is_reported_and_rewritten(tmp_path, monkeypatch):
    from devtools import option_tables

    doc = tmp_path / "JOBS.md"
    doc.write_text("before\n<!-- options:settings -->\n| old | table |\n<!-- /options:settings -->\nafter\n")
    monkeypatch.setattr(option_tables, "ROOT", tmp_path)
    monkeypatch.setattr(option_tables, "DOCS", ("JOBS.md",))
    assert option_tables.main(["--check"]) == 1 and "| old | table |" in doc.read_text()
    assert option_tables.main([]) == 0
    text = doc.read_text()
    assert text.startswith("before\n<!-- options:settings -->\n| setting |") and text.endswith(
        "<!-- /options:settings -->\nafter\n")
    assert "| old | table |" not in text and "`--storage-class`" in text
    assert option_tables.main(["--check"]) == 0


def test_a_new_option_is_one_entry_in_the_table_and_reaches_the_engine(monkeypatch, capsys, minio, s3, buckets):
    """An option added to the table alone is an `archive` flag (help, type, exit 2 naming it),
    a job key (checked, with its default), a row of the docs' settings table, and the value of
    the engine's field of its name: archived with it, the archive's first part is that size."""
    import os

    from devtools.option_tables import settings_table
    from helpers import seed

    import s3arch.cli as cli
    from s3arch.core import options
    from s3arch.core.errors import BadArgument
    from s3arch.ops.jobs import job_from_dict

    knob = options.Option("min_part_size", "smallest part of the archive", default="5MiB", doc_default="5 MiB",
                          check=lambda value, what: options.parse_size(value), cli=("archive",),
                          operator=None, help="the archive's parts are at least this large (default 5MiB)")
    monkeypatch.setattr(options, "OPTIONS", (*options.OPTIONS, knob))

    assert "--min-part-size MIN_PART_SIZE the archive's parts are at least this large (default 5MiB)" in _help(
        "archive")
    argv = ["archive", "s3://logs-bucket/x/", "s3://vault-bucket/"]
    assert cli._parser().parse_args(argv).min_part_size == "5MiB"
    assert job_from_dict("j", {**JOB, "min_part_size": "6MiB"}).spec_for("logs/2026/11/01/").min_part_size == 6 << 20
    with pytest.raises(BadArgument, match=r"cannot read size 'six'"):
        job_from_dict("j", {**JOB, "min_part_size": "six"})
    assert "| smallest part of the archive | `min_part_size` | `--min-part-size` | 5 MiB |" in settings_table()

    src, dst = buckets
    seed(s3, src, {f"day/{i}.bin": os.urandom(3 << 20) for i in range(5)})
    for name, value in minio.env().items():
        monkeypatch.setenv(name, value)
    assert cli.main(["archive", f"s3://{src}/day/", f"s3://{dst}/a/", "--storage-class", "STANDARD",
                     "--level", "0", "--processes", "1", "--quiet", "--min-part-size", "6MiB"]) == 0
    first = s3.head_object(Bucket=dst, Key=f"a/{src}/day.tar.gz", PartNumber=1)
    assert first["ContentLength"] == 6 << 20 and first["PartsCount"] >= 2


def test_an_option_that_reaches_no_engine_field_is_refused_by_name(monkeypatch):
    """The failure the table's test guards against: a flag parsed, then dropped on the way."""
    from s3arch.core import options
    from s3arch.core.config import S3Url

    knob = options.Option("example_knob", "an example knob", default=3, flag_type=int, cli=("archive",),
                          operator=None)
    monkeypatch.setattr(options, "OPTIONS", (*options.OPTIONS, knob))
    with pytest.raises(TypeError, match="'example_knob' reaches no ArchiveSpec field"):
        options.archive_spec(S3Url("logs-bucket", "x/"), S3Url("vault-bucket"), {"example_knob": 4})


def test_a_new_restore_option_is_one_entry_in_the_table(monkeypatch, capsys):
    """A restore option added to the table alone is a `restore` flag (help, type, exit 2 naming
    it), a field of the restore DAG's trigger form, a parameter the restore DAG hands its
    operator, and what the operator check asks the operator to take and template."""
    from s3arch_airflow.factory import restore_dag, restore_params

    from s3arch.cli import _parser
    from s3arch.core import options
    from s3arch.ops.jobs import job_from_dict

    hold = options.Option("example_hold", "an example hold", default=2, flag_type=int, job=None, operator="restore",
                          templated=True, cli=("restore",), help="hours to hold the example (default 2)",
                          form=options.Form("Example hold", "Hours to hold the example.", {"minimum": 1}))
    monkeypatch.setattr(options, "OPTIONS", (*options.OPTIONS, hold))

    assert "--example-hold EXAMPLE_HOLD hours to hold the example (default 2)" in _help("restore")
    argv = ["restore", "s3://vault-bucket/a/b.tar.gz"]
    assert _parser().parse_args(argv).example_hold == 2
    assert _parser().parse_args([*argv, "--example-hold", "5"]).example_hold == 5
    with pytest.raises(SystemExit) as refused:
        _parser().parse_args([*argv, "--example-hold", "five"])
    assert refused.value.code == 2 and "--example-hold: invalid int value: 'five'" in capsys.readouterr().err

    field = restore_params()["example_hold"]
    assert (field.value, field.description) == (2, "Hours to hold the example.")
    assert field.schema == {"type": "integer", "title": "Example hold", "minimum": 1}
    # The DAG hands it to the operator, which does not take it yet: the check and the DAG say so.
    assert restore_operator_mismatches() == ["takes no example_hold", "example_hold is no template field"]
    with pytest.raises(TypeError, match="unexpected keyword argument 'example_hold'"):
        restore_dag(job_from_dict("j", JOB))


def test_the_restore_operator_takes_every_restore_option_with_its_default_and_templates_the_marked():
    assert restore_operator_mismatches() == []


def test_the_restore_dag_asks_each_form_field_and_hands_it_to_its_operator_by_name():
    from s3arch_airflow.factory import restore_dag

    from s3arch.core.options import form_options
    from s3arch.ops.jobs import job_from_dict

    dag = restore_dag(job_from_dict("j", JOB))
    fields = [o.name for o in form_options()]
    assert list(dag.params) == ["date_from", "date_to", "prefixes", *fields]
    assert set(fields) == {"target", "keys", "glob", "overwrite", "tier", "days"}
    tier = dag.params.get_param("tier")
    assert (tier.value, tier.schema["enum"], tier.schema["title"]) == ("Standard", ["Expedited", "Standard", "Bulk"],
                                                                        "Retrieval tier")
    handed = dag.get_task("restore").partial_kwargs
    assert {name: handed[name] for name in fields} == {name: f"{{{{ params[{name!r}] }}}}" for name in fields}


def test_a_job_key_outside_the_table_and_the_jobs_fields_is_refused():
    from s3arch.core.errors import BadArgument
    from s3arch.ops.jobs import job_from_dict

    with pytest.raises(BadArgument, match="unknown field\\(s\\) example_knob") as refused:
        job_from_dict("j", {**JOB, "example_knob": 7})
    assert "storage_class" in refused.value.hint and "options" not in refused.value.hint.split(", ")


def test_every_option_is_a_parameter_of_the_operators_it_names_and_templated_where_marked():
    from s3arch_airflow.operators import (S3ArchiveBaseOperator, S3ArchivePrefixOperator, S3ArchiveSegmentOperator,
                                          S3AssembleSegmentsOperator, S3PrepareSegmentsOperator)
    from s3arch_airflow.restore import S3RestoreArchiveOperator

    from s3arch.core.options import OPTIONS

    steps = (S3ArchivePrefixOperator, S3PrepareSegmentsOperator, S3ArchiveSegmentOperator, S3AssembleSegmentsOperator)
    takers = {"step": steps, "deleting": (S3ArchivePrefixOperator, S3AssembleSegmentsOperator),
              "segments": (S3PrepareSegmentsOperator, S3ArchiveSegmentOperator, S3AssembleSegmentsOperator),
              "restore": (S3RestoreArchiveOperator,)}
    for option in OPTIONS:
        for operator in takers.get(option.operator or "", ()):
            assert option.name in _parameters(operator), f"{operator.__name__} takes no {option.name}"
        if option.operator != "restore":
            assert (option.name in S3ArchiveBaseOperator.template_fields) == option.templated, option.name
    assert {o.operator for o in OPTIONS} <= {*takers, None}
    assert set(S3ArchiveBaseOperator.template_fields) >= {"source_bucket", "destination", "aws_conn_id"}
    for operator in steps:
        assert set(operator.template_fields) >= set(S3ArchiveBaseOperator.template_fields), operator.__name__


def test_a_job_gives_every_step_option_to_the_operators_with_its_value():
    from s3arch.core.options import OPTIONS
    from s3arch.ops.jobs import job_from_dict

    job = job_from_dict("j", {**JOB, "storage_class": "DEEP_ARCHIVE", "memory_budget": "512MiB",
                              "sse": "aws:kms", "sse_bucket_key": True, "lease_ttl": 60})
    args = job.operator_args
    assert {o.name for o in OPTIONS if o.job == "key" and o.operator == "step"} == set(args)
    assert (args["storage_class"], args["memory_budget"], args["sse"], args["sse_bucket_key"], args["lease_ttl"]) == \
        ("DEEP_ARCHIVE", 512 << 20, "aws:kms", True, 60.0)
    assert (job.storage_class, job.codec, job.concurrency, job.processes) == ("DEEP_ARCHIVE", "gzip", 128, 1)


def test_a_job_keeps_its_options_through_pickling():
    """Airflow and the segment workers pickle what they hand on; a job's options are read as
    attributes, which must not recurse while it is being rebuilt."""
    import pickle

    from s3arch.ops.jobs import job_from_dict

    job = job_from_dict("j", {**JOB, "codec": "zstd"})
    copy = pickle.loads(pickle.dumps(job))
    assert copy == job and copy.codec == "zstd"
    with pytest.raises(AttributeError, match="no attribute 'no_such_option'"):
        copy.no_such_option


def test_every_archive_flag_is_the_engine_setting_of_its_name_with_its_default():
    """cli.py hands each `archive` flag to ArchiveSpec under its name (``threads`` is its
    ``compress_threads``), so each is a field there, and a default both declare is the same."""
    from dataclasses import MISSING, fields

    from s3arch.core.config import ArchiveSpec
    from s3arch.core.options import options_for

    spec_defaults = {f.name: f.default for f in fields(ArchiveSpec)}
    for option in options_for("archive"):
        if option.name == "late_window":  # which days the command runs, not a setting of one archive
            continue
        name = "compress_threads" if option.name == "threads" else option.name
        assert name in spec_defaults, f"--{option.name} is no ArchiveSpec field"
        # None: the engine's own default applies (threads, processes); segments' 0 is the
        # engine's "one per process", which a job says by leaving it out.
        if option.default is None or spec_defaults[name] is MISSING or option.name == "segments":
            continue
        value = option.check(option.default, option.name) if option.check else option.default
        assert value == spec_defaults[name], option.name


def test_every_job_key_is_in_a_table_of_the_jobs_doc_and_the_field_table_names_only_job_keys():
    """A job's own fields are rows of docs/JOBS.md's field table (by hand), its options rows of
    the settings table (generated); the field table names no key that a job does not take."""
    import re

    from s3arch.core.options import job_options
    from s3arch.ops.jobs import job_keys

    text = (ROOT / "docs/JOBS.md").read_text()
    field_table = re.search(r"^\| field \| default \| meaning \|\n((?:\|.*\n)+)", text, flags=re.M).group(1)
    named = {name for row in field_table.splitlines()[1:] for name in re.findall(r"`(\w+)`", row.split("|")[1])}
    settings = re.search(r"<!-- options:settings -->\n(.*?)<!-- /options:settings -->", text, flags=re.S).group(1)
    in_settings = {o.name for o in job_options() if f"| `{o.name}` |" in settings}
    assert job_keys() - named - in_settings == set()
    assert named - job_keys() == {"layout", "filters"}  # a preset's, turned into prefix_template
