"""One declaration per option (tasks/core/options.py): the CLI's flags, the job file's keys, the
keys of the archive operators' ``options``, the archive and restore DAGs' trigger forms and the
docs' option tables are made from the table, and the operators' parameters and template fields
are checked against it."""

from __future__ import annotations

import inspect

import pytest

from helpers import ROOT

JOB = {"source": "s3://logs-bucket/", "prefix_template": "logs/{date:%Y/%m/%d}/", "destination": "s3://vault-bucket/a/"}


def _parameters(*operators) -> set[str]:
    return {name for op in operators for cls in op.__mro__ if "__init__" in vars(cls)
            for name in inspect.signature(cls.__init__).parameters}


def _taken(*operators) -> set[str]:
    """What the operators take: their parameters and, for an archive step, its ``options``' keys."""
    return _parameters(*operators) | {name for op in operators if hasattr(op, "option_names")
                                      for name in op.option_names()}


def _help(command: str) -> str:
    from s3arch.cli import _parser

    sub = next(a for a in _parser()._actions if a.dest == "command").choices[command]
    return " ".join(sub.format_help().split())


# The restore operator's parameters: what it restores and how it waits; every setting is a key
# of its ``options``.
RESTORE_OPERATOR_OWN = {"self", "source_bucket", "prefix", "destination", "options", "deferrable", "kwargs"}
# Its template fields beside the connection's: the prefix and its ``options``, as a whole.
RESTORE_TEMPLATED = {"prefix", "options"}
CONNECTION_FIELDS = {"aws_conn_id", "region_name", "verify", "botocore_config"}


def restore_operator_mismatches() -> list[str]:
    """Where S3RestoreArchiveOperator differs from the option table: a restore option its
    ``options`` do not take, or that an operator given none has at another default than the
    table's; a key of its ``options`` that is no option; a parameter beside its own (an option
    made a parameter again); a template field beside the prefix, ``options`` and the
    connection's, or one of those missing; a constructor over 10 parameters (issue 45)."""
    from s3arch_airflow.restore import S3RestoreArchiveOperator

    from s3arch.core.options import OPTIONS

    taken = S3RestoreArchiveOperator.option_names()
    defaults = S3RestoreArchiveOperator(task_id="defaults", source_bucket="logs-bucket", prefix="p/",
                                        destination="s3://vault-bucket/a/").values()
    restore = {o.name: o for o in OPTIONS if o.operator == "restore"}
    others = {o.name: o for o in OPTIONS if o.operator != "restore"}  # the job's settings the DAG passes on
    wrong = [f"takes no {name}" for name in restore if name not in taken]
    for name in taken:
        option = restore.get(name) or others.get(name)
        if option is None:
            wrong.append(f"{name} is no option")
        elif defaults[name] != option.default_for_job:  # a restore option's: its ``default``
            wrong.append(f"{name} defaults to {defaults[name]!r}, the table to {option.default_for_job!r}")
    parameters = inspect.signature(S3RestoreArchiveOperator.__init__).parameters
    wrong += [f"{name} is a parameter, not a key of options" for name in parameters if name not in RESTORE_OPERATOR_OWN]
    fields = set(S3RestoreArchiveOperator.template_fields) - CONNECTION_FIELDS
    wrong += [f"{name} is templated beside options" for name in sorted(fields - RESTORE_TEMPLATED)]
    wrong += [f"{name} is no template field" for name in sorted(RESTORE_TEMPLATED - fields)]
    if len(parameters) > 10:
        wrong.append(f"its constructor takes {len(parameters)} parameters")
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


def _handed(dag, task_id: str) -> dict:
    """What the DAG hands one of its operators: a mapped one's partial kwargs, else its attributes."""
    task = dag.get_task(task_id)
    return task.partial_kwargs if hasattr(task, "partial_kwargs") else vars(task)


def test_a_new_option_is_one_entry_in_the_table_and_reaches_the_engine(monkeypatch, capsys, minio, s3, buckets,
                                                                        clients):
    """An option added to the table alone is an `archive` flag (help, type, exit 2 naming it),
    a job key (checked, with its default), a row of the docs' settings table, a key of the
    archive operators' ``options`` that the archive DAG hands them from the job, and the value
    of the engine's field of its name: archived with it, by the CLI or the operator, the
    archive's first part is that size."""
    import os

    from devtools.option_tables import settings_table
    from helpers import TaskInstanceStub, archive_task, seed
    from s3arch_airflow.factory import archive_dag
    from s3arch_airflow.operators import S3ArchivePrefixOperator

    import s3arch.cli as cli
    from s3arch.core import options
    from s3arch.core.errors import BadArgument
    from s3arch.ops.jobs import job_from_dict

    knob = options.Option("min_part_size", "smallest part of the archive", default="5MiB", doc_default="5 MiB",
                          check=lambda value, what: options.parse_size(value), cli=("archive",),
                          help="the archive's parts are at least this large (default 5MiB)")
    monkeypatch.setattr(options, "OPTIONS", (*options.OPTIONS, knob))

    assert "--min-part-size MIN_PART_SIZE the archive's parts are at least this large (default 5MiB)" in _help(
        "archive")
    argv = ["archive", "s3://logs-bucket/x/", "s3://vault-bucket/"]
    assert cli._parser().parse_args(argv).min_part_size == "5MiB"
    assert job_from_dict("j", {**JOB, "min_part_size": "6MiB"}).spec_for("logs/2026/11/01/").min_part_size == 6 << 20
    with pytest.raises(BadArgument, match=r"cannot read size 'six'"):
        job_from_dict("j", {**JOB, "min_part_size": "six"})
    assert "| smallest part of the archive | `min_part_size` | `--min-part-size` | 5 MiB |" in settings_table()
    # A key of the archive steps' options, handed them by the archive DAG from the job.
    job = job_from_dict("j", {**JOB, "min_part_size": "7MiB"})
    assert job.operator_args["min_part_size"] == 7 << 20
    for step in ("plan", "archive"):
        assert _handed(archive_dag(job), step)["options"]["min_part_size"] == 7 << 20
    assert _taken(S3ArchivePrefixOperator) >= {"min_part_size"}

    src, dst = buckets
    seed(s3, src, {f"{day}/{i}.bin": os.urandom(3 << 20) for day in ("day", "task") for i in range(5)})
    for name, value in minio.env().items():
        monkeypatch.setenv(name, value)
    assert cli.main(["archive", f"s3://{src}/day/", f"s3://{dst}/a/", "--storage-class", "STANDARD",
                     "--level", "0", "--processes", "1", "--quiet", "--min-part-size", "6MiB"]) == 0
    first = s3.head_object(Bucket=dst, Key=f"a/{src}/day.tar.gz", PartNumber=1)
    assert first["ContentLength"] == 6 << 20 and first["PartsCount"] >= 2
    # And the operator archives with it.
    operator = archive_task(monkeypatch, clients, buckets, "S3ArchivePrefixOperator", "task/",
                            options={"level": 0, "min_part_size": "6MiB"})
    assert [row["status"] for row in operator.execute({"ti": TaskInstanceStub()})] == ["archived"]
    first = s3.head_object(Bucket=dst, Key=f"a/{src}/task.tar.gz", PartNumber=1)
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
    it), a field of the restore DAG's trigger form, a key of ``options`` the restore DAG hands
    its operator as the run's param, and a key the operator takes (templated, at the table's
    default when left out, its rendered value checked as the table says)."""
    from s3arch_airflow.factory import restore_dag, restore_params

    from s3arch.cli import _parser
    from s3arch.core import options
    from s3arch.core.errors import BadArgument
    from s3arch.ops.jobs import job_from_dict

    hold = options.Option("example_hold", "an example hold", default=2, flag_type=int, job=None, operator="restore",
                          check=options.whole(1), cli=("restore",), help="hours to hold the example (default 2)",
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
    # The operator takes it, at the table's default; the DAG hands it the run's param.
    assert restore_operator_mismatches() == []
    dag = restore_dag(job_from_dict("j", JOB))
    assert list(dag.params)[-1] == "example_hold"
    handed = _handed(dag, "restore")["options"]
    assert handed["example_hold"] == "{{ params['example_hold'] }}"
    operator = _rendered_restore(handed, {**_form_defaults(dag), "example_hold": 5})
    assert operator.values()["example_hold"] == 5
    with pytest.raises(BadArgument, match="example_hold must be a whole number >= 1"):
        _rendered_restore(handed, {**_form_defaults(dag), "example_hold": 0}).values()


def _form_defaults(dag) -> dict:
    """The run's params of a trigger form left as it is."""
    return {name: dag.params[name] for name in dag.params}


def _rendered_restore(options: dict, params: dict):
    """A restore operator given ``options`` in a DAG that renders as the restore DAG does
    (native objects), rendered with the run's ``params``."""
    from airflow.sdk import DAG
    from s3arch_airflow.restore import S3RestoreArchiveOperator

    with DAG("restore_rendered", schedule=None, render_template_as_native_obj=True):
        operator = S3RestoreArchiveOperator(task_id="restore", source_bucket="logs-bucket", prefix="p/",
                                            destination="s3://vault-bucket/a/", options=options)
    operator.render_template_fields({"params": params})
    return operator


def test_the_restore_operator_takes_every_restore_option_in_its_options_with_the_table_s_default():
    assert restore_operator_mismatches() == []


def test_the_restore_dag_asks_each_form_field_and_hands_it_to_its_operator_by_name():
    """Each field of the restore form is the key of its name in the restore task's ``options``,
    as the run's param; the job's restore settings are the others. Rendered as the DAG renders
    (native objects), each reaches the operator checked: an account number rendered as a number
    is the account's text again."""
    from s3arch_airflow.factory import restore_dag

    from s3arch.core.options import form_options
    from s3arch.ops.jobs import job_from_dict

    job = job_from_dict("j", {**JOB, "memory_budget": "128MiB", "poll_interval": 60, "expected_owner": "123456789012"})
    dag = restore_dag(job)
    fields = [o.name for o in form_options()]
    assert list(dag.params) == ["date_from", "date_to", "prefixes", *fields]
    assert set(fields) == {"target", "keys", "glob", "overwrite", "tier", "days"}
    tier = dag.params.get_param("tier")
    assert (tier.value, tier.schema["enum"], tier.schema["title"]) == ("Standard", ["Expedited", "Standard", "Bulk"],
                                                                        "Retrieval tier")
    handed = dag.get_task("restore").partial_kwargs
    assert set(handed) >= {"source_bucket", "destination", "options"} and not set(fields) & set(handed)
    options = handed["options"]
    assert {name: options[name] for name in fields} == {name: f"{{{{ params[{name!r}] }}}}" for name in fields}
    assert {name: options[name] for name in set(options) - set(fields)} == {
        "memory_budget": 128 << 20, "poll_interval": 60, "expected_owner": "123456789012"}

    params = {**_form_defaults(dag), "target": "s3://scratch/back/", "keys": ["logs/a.log"], "tier": "Bulk", "days": 3}
    values = _rendered_restore(options, params).values()
    assert values == {"target": "s3://scratch/back/", "keys": ["logs/a.log"], "glob": None, "overwrite": False,
                      "tier": "Bulk", "days": 3, "wait_timeout": 48 * 3600, "poll_interval": 60,
                      "memory_budget": 128 << 20, "expected_owner": "123456789012"}
    assert _rendered_restore({"expected_owner": "{{ params.owner }}"}, {"owner": 123456789012}).values()[
        "expected_owner"] == "123456789012"


def test_the_restore_operator_checks_its_options_by_name_and_their_values_once_rendered():
    """``options`` takes the restore options and the job's ``memory_budget`` and
    ``expected_owner``: an unknown key is refused naming it and the known ones; a rendered
    value is checked as the table says (a tier is one of S3's; a size is read)."""
    from s3arch_airflow.restore import S3RestoreArchiveOperator

    from s3arch.core.errors import BadArgument

    where = dict(task_id="r", source_bucket="logs-bucket", prefix="p/", destination="s3://vault-bucket/a/")
    with pytest.raises(TypeError, match=r"options has unknown key\(s\) 'teir'; the restore options are: target, keys, "
                                        r"glob, overwrite, tier, days, wait_timeout, poll_interval, memory_budget, "
                                        r"expected_owner \(docs/RESTORE.md"):
        S3RestoreArchiveOperator(**where, options={"teir": "Bulk"})
    assert S3RestoreArchiveOperator(**where, options={"memory_budget": "64MiB"}).values()["memory_budget"] == 64 << 20
    with pytest.raises(BadArgument, match="tier 'Fast' is not one of Expedited, Standard, Bulk"):
        S3RestoreArchiveOperator(**where, options={"tier": "Fast"}).values()


def test_the_restore_operator_s_old_keywords_still_work_for_a_release_and_warn_naming_options(recwarn):
    """0.6's spelling, each restore option a keyword argument, builds the same operator (and the
    same mapped task) with a DeprecationWarning naming ``options={...}``; an option given both
    ways is an error."""
    from airflow.sdk import DAG

    from s3arch_airflow.operator_options import S3ArchDeprecationWarning
    from s3arch_airflow.restore import S3RestoreArchiveOperator

    where = dict(source_bucket="logs-bucket", destination="s3://vault-bucket/a/")
    new = S3RestoreArchiveOperator(task_id="new", prefix="p/", **where, options={
        "target": "s3://scratch/back/", "tier": "Bulk", "days": 3, "memory_budget": "128MiB"})
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]
    with pytest.warns(DeprecationWarning, match=r"S3RestoreArchiveOperator\(target=\.\.\., tier=\.\.\., days=\.\.\., "
                                                r"memory_budget=\.\.\.\): restore options as keyword arguments are "
                                                r"deprecated.* pass them as options=\{'target': \.\.\., 'tier'") as warned:
        old = S3RestoreArchiveOperator(task_id="old", prefix="p/", target="s3://scratch/back/", tier="Bulk", days=3,
                                       memory_budget="128MiB", **where)
    assert {w.category for w in warned} == {S3ArchDeprecationWarning}
    assert warned[0].filename == __file__  # at the DAG's line, not inside Airflow
    assert old.options == new.options and old.values() == new.values()
    assert (old.values()["tier"], old.values()["memory_budget"], old.deferrable) == ("Bulk", 128 << 20, True)
    with pytest.warns(S3ArchDeprecationWarning, match="options="):
        with DAG("old_restore_partial", schedule=None):
            mapped = S3RestoreArchiveOperator.partial(task_id="restore", tier="Bulk", poll_interval=60,
                                                      **where).expand(prefix=["p/", "q/"])
    assert mapped.partial_kwargs["options"] == {"tier": "Bulk", "poll_interval": 60}
    with pytest.raises(TypeError, match="tier given both in options and as keyword"):
        S3RestoreArchiveOperator(task_id="both", prefix="p/", tier="Bulk", options={"tier": "Standard"}, **where)


def test_a_job_key_outside_the_table_and_the_jobs_fields_is_refused():
    from s3arch.core.errors import BadArgument
    from s3arch.ops.jobs import job_from_dict

    with pytest.raises(BadArgument, match="unknown field\\(s\\) example_knob") as refused:
        job_from_dict("j", {**JOB, "example_knob": 7})
    assert "storage_class" in refused.value.hint and "options" not in refused.value.hint.split(", ")


def test_every_option_is_taken_by_the_operators_it_names_and_templated_where_marked():
    """An archive step option is a key of every archive step's ``options`` (templated as a
    whole), a "deleting" or "segments" option a parameter of the steps it names, a restore
    option a key of the restore operator's ``options`` (test_the_restore_operator_takes_...)."""
    from s3arch_airflow.archive_base import S3ArchiveBaseOperator
    from s3arch_airflow.operators import (S3ArchivePrefixOperator, S3ArchiveSegmentOperator, S3AssembleSegmentsOperator,
                                          S3PrepareSegmentsOperator)
    from s3arch_airflow.restore import S3RestoreArchiveOperator

    from s3arch.core.options import OPTIONS

    steps = (S3ArchivePrefixOperator, S3PrepareSegmentsOperator, S3ArchiveSegmentOperator, S3AssembleSegmentsOperator)
    takers = {"step": steps, "deleting": (S3ArchivePrefixOperator, S3AssembleSegmentsOperator),
              "segments": (S3PrepareSegmentsOperator, S3ArchiveSegmentOperator, S3AssembleSegmentsOperator),
              "restore": (S3RestoreArchiveOperator,)}
    for option in OPTIONS:
        for operator in takers.get(option.operator or "", ()):
            assert option.name in _taken(operator), f"{operator.__name__} takes no {option.name}"
            in_options = option.name in operator.option_names()
            assert in_options == (option.operator in ("step", "restore")), (operator.__name__, option.name)
        # every option an operator's ``options`` holds is templated there, none is a field of its own
        assert option.name not in {*S3ArchiveBaseOperator.template_fields, *S3RestoreArchiveOperator.template_fields}
    assert {o.operator for o in OPTIONS} <= {*takers, None}
    assert set(S3ArchiveBaseOperator.template_fields) >= {"source_bucket", "destination", "options", "aws_conn_id"}
    for operator in steps:
        assert set(operator.template_fields) >= set(S3ArchiveBaseOperator.template_fields), operator.__name__
        widths = [len(inspect.signature(cls.__init__).parameters) for cls in operator.__mro__
                  if "__init__" in vars(cls) and cls.__module__.startswith("s3arch_airflow")]
        assert max(widths) <= 10, (operator.__name__, widths)  # issue 45: no constructor over 10 parameters


def test_an_archive_step_checks_its_options_by_name_and_templates_them():
    """``options`` takes the table's archive step options: an unknown key is refused naming it
    and the known ones; a job's ``operator_args`` build the job's spec; a template in a value is
    rendered with the task's context before the spec is made."""
    from s3arch_airflow.operators import S3ArchivePrefixOperator

    from s3arch.core.options import step_options
    from s3arch.ops.jobs import job_from_dict

    with pytest.raises(TypeError, match=r"options has unknown key\(s\) 'storage_clas'.* the archive options are: "
                                        r"storage_class, codec, .*\bthrottle_budget\b"):
        S3ArchivePrefixOperator(task_id="a", source_bucket="app-logs", prefix="p/", destination="s3://vault/a/",
                                options={"storage_clas": "DEEP_ARCHIVE"})
    with pytest.raises(TypeError, match=r"'delete_source' \(delete_source: an argument of the operators"):
        S3ArchivePrefixOperator(task_id="a", source_bucket="app-logs", prefix="p/", destination="s3://vault/a/",
                                options={"delete_source": True})
    assert set(S3ArchivePrefixOperator.option_names()) == set(step_options())

    job = job_from_dict("j", {**JOB, "storage_class": "DEEP_ARCHIVE", "sse": "aws:kms"})
    operator = S3ArchivePrefixOperator(
        task_id="t", source_bucket="logs-bucket", prefix="logs/2026/11/01/", destination="s3://vault-bucket/a/",
        options={**job.operator_args, "codec": "{{ params.codec }}", "dry_run": "{{ params.dry_run }}"})
    operator.render_template_fields({"params": {"codec": "zstd", "dry_run": True}})
    spec = operator._spec("logs/2026/11/01/")
    assert (spec.storage_class, spec.sse, spec.codec, spec.dry_run) == ("DEEP_ARCHIVE", "aws:kms", "zstd", True)
    assert operator.options["codec"] == "zstd" and operator.storage_class == "DEEP_ARCHIVE"


def test_an_archive_steps_account_rendered_as_a_number_reaches_the_hook_as_the_account():
    """Native rendering reads a templated account's twelve digits as a number; the hook (and so
    every request's ExpectedBucketOwner) gets the account's text, as the restore operator's."""
    from s3arch_airflow.operators import S3ArchivePrefixOperator

    operator = S3ArchivePrefixOperator(task_id="t", source_bucket="logs-bucket", prefix="p/",
                                       destination="s3://vault-bucket/a/",
                                       options={"expected_owner": "{{ params.owner }}"})
    operator.render_template_fields({"params": {"owner": 123456789012}})
    assert operator.hook.expected_owner == "123456789012"


def test_the_old_keyword_options_still_work_for_a_release_and_warn_naming_options(recwarn):
    """Round 5's spelling, each option a keyword argument, builds the same operator (and the
    same mapped task) with a DeprecationWarning naming ``options={...}``; an option given both
    ways is an error."""
    from airflow.sdk import DAG

    from s3arch_airflow.operator_options import S3ArchDeprecationWarning
    from s3arch_airflow.operators import S3ArchivePrefixOperator, S3ArchiveSegmentOperator

    where = dict(source_bucket="logs-bucket", destination="s3://vault-bucket/a/")
    new = S3ArchivePrefixOperator(task_id="new", prefix="p/", **where,
                                  options={"storage_class": "DEEP_ARCHIVE", "sse": "aws:kms", "processes": 2})
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]
    with pytest.warns(DeprecationWarning, match=r"S3ArchivePrefixOperator\(storage_class=\.\.\., sse=\.\.\., "
                                                r"processes=\.\.\.\): .*deprecated.* pass them as "
                                                r"options=\{'storage_class': \.\.\., 'sse'") as warned:
        old = S3ArchivePrefixOperator(task_id="old", prefix="p/", storage_class="DEEP_ARCHIVE", sse="aws:kms",
                                      processes=2, **where)
    assert {w.category for w in warned} == {S3ArchDeprecationWarning}
    assert warned[0].filename == __file__  # at the DAG's line, not inside Airflow
    assert old.options == new.options and old._spec("p/") == new._spec("p/")
    with pytest.warns(S3ArchDeprecationWarning, match="options="):
        with DAG("old_partial", schedule=None):
            mapped = S3ArchiveSegmentOperator.partial(task_id="segment", segments=2, codec="zstd", **where).expand(
                prefix=["p/"], segment=[0, 1])
    assert mapped.partial_kwargs["options"] == {"codec": "zstd"}
    with pytest.raises(TypeError, match="sse given both in options and as keyword"):
        S3ArchivePrefixOperator(task_id="both", prefix="p/", sse="aws:kms", options={"sse": "AES256"}, **where)


def test_a_new_field_of_the_archive_form_is_one_entry_in_the_table(monkeypatch):
    """An archive option with a form, added to the table alone, is a field of the archive DAG's
    trigger form (default, type, title, description), handed to every archive step as the
    run's param in ``options``, and its rendered value reaches the engine's field of its name."""
    from s3arch_airflow.factory import archive_dag, archive_params
    from s3arch_airflow.operators import S3ArchivePrefixOperator

    from s3arch.core import options
    from s3arch.ops.jobs import job_from_dict

    knob = options.Option("min_part_size", "smallest part of the archive", default="5MiB", job="param",
                          check=lambda value, what: options.parse_size(value), cli=("archive",),
                          form=options.Form("Smallest part", "The archive's parts are at least this large."))
    monkeypatch.setattr(options, "OPTIONS", (*options.OPTIONS, knob))
    field = archive_params()["min_part_size"]
    assert (field.value, field.description) == ("5MiB", "The archive's parts are at least this large.")
    assert field.schema == {"type": "string", "title": "Smallest part"}
    dag = archive_dag(job_from_dict("j", JOB))
    assert list(dag.params) == ["date_from", "date_to", "prefixes", "overwrite", "dry_run", "min_part_size"]
    for step in ("plan", "archive"):
        assert _handed(dag, step)["options"]["min_part_size"] == "{{ params.min_part_size }}"
    operator = S3ArchivePrefixOperator(task_id="t", source_bucket="logs-bucket", prefix="p/",
                                       destination="s3://vault-bucket/a/", options=_handed(dag, "archive")["options"])
    operator.render_template_fields({"params": {"min_part_size": "6MiB", "overwrite": False, "dry_run": False}})
    assert operator._spec("p/").min_part_size == 6 << 20


def test_the_archive_form_is_the_table_s_with_the_labels_and_defaults_it_had():
    """The archive DAG's trigger form, generated: its switches as they were written by hand."""
    from s3arch_airflow.factory import archive_params

    params = archive_params()
    assert list(params) == ["date_from", "date_to", "prefixes", "overwrite", "dry_run"]
    assert {name: (params[name].value, params[name].description, params[name].schema)
            for name in ("overwrite", "dry_run")} == {
        "overwrite": (False, "Re-archive prefixes that already have a complete archive.",
                      {"type": ["boolean", "null"], "title": "Overwrite (optional)"}),
        "dry_run": (False, "List and estimate only; write nothing.",
                    {"type": ["boolean", "null"], "title": "Dry run (optional)"})}


@pytest.mark.parametrize("doc, operator", [("docs/JOBS.md", "S3ArchivePrefixOperator"),
                                           ("docs/RESTORE.md", "S3RestoreArchiveOperator")])
def test_the_docs_operator_example_builds_in_the_new_form_without_a_warning(doc, operator):
    """The docs' own-DAG example of each operator, run as printed: no deprecated spelling."""
    import re
    import warnings

    text = (ROOT / doc).read_text()
    example = re.search(rf"```python\n(from s3arch_airflow import {operator}\n.*?)```", text, re.S).group(1)
    assert "options={" in example
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        exec(compile(example, doc, "exec"), {})


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
