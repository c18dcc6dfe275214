"""The operators' ``options``: the archive steps' (the job's archive options) and the restore
operator's (its restore options), by the option table's names (tasks/core/options.py), checked
by name; and the keyword spellings of earlier releases moved into them for one more release,
with a warning that names ``options={...}``.

An operator takes ``options`` as the amazon provider's operators take their ``extra_args``: one
dict of settings (an archive step: the job's ``operator_args``), templated as a whole, beside
the few arguments that are the task's own (``source_bucket``, ``destination``, ``prefix``,
``aws_conn_id``, ...). Which keys an operator's ``options`` takes is an ``OptionKeys``
(``ARCHIVE``, ``RESTORE``), which every helper here takes. Nothing here touches S3 or imports
the engine's heavy parts.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from s3arch.core import options as table

# Round 3's spellings, for one more release (CHANGELOG.md, Deprecated): what replaced them.
RENAMED = {"preview": "dry_run"}
SPEC_OPTIONS_KWARG = "spec_options"

# The archive options that are an operator's own arguments, not keys of its ``options``.
OWN_ARGUMENTS = ("delete_source", "delete_versions", "segments")


@dataclass(frozen=True)
class OptionKeys:
    """The keys one kind of operator's ``options`` takes, from the option table: the options
    whose ``operator`` is ``taker`` and, named in ``also``, some of the archive steps'. ``what``,
    ``names_are`` and ``docs`` are its messages' words; ``own``: table options that are the
    operators' own arguments instead; ``renamed`` and ``spec_options_kwarg``: earlier spellings
    still moved in. ``checked``: each rendered value goes through the table's check here (the
    archive steps' go through it in ``archive_spec``, which makes their spec)."""

    what: str
    taker: str
    names_are: str
    docs: str
    also: tuple[str, ...] = ()
    own: tuple[str, ...] = ()
    checked: bool = False
    renamed: Mapping[str, str] = field(default_factory=dict)
    spec_options_kwarg: str | None = None

    def options(self) -> dict[str, table.Option]:
        """The options taken, by name (the table read now: a new entry is taken at once)."""
        taken = {o.name: o for o in table.OPTIONS if o.operator == self.taker}
        return {**taken, **{o.name: o for o in table.OPTIONS
                            if o.operator == "step" and o.name in self.also and o.name not in taken}}

    def names(self) -> tuple[str, ...]:
        return tuple(self.options())

    def defaults(self) -> dict[str, Any]:
        """Each option's value where ``options`` leaves it out: the job's default (an archive
        step's ``processes`` 1: one task, one process), the table's for a restore option."""
        return {name: option.default_for_job for name, option in self.options().items()}


# Every archive step's options: the table's "step" options.
ARCHIVE = OptionKeys("archive", "step", names_are="the job's keys, same names",
                     docs="the job's keys: docs/JOBS.md, Settings", own=OWN_ARGUMENTS, renamed=RENAMED,
                     spec_options_kwarg=SPEC_OPTIONS_KWARG)
# The restore operator's: the table's restore options, and the job's memory budget and bucket
# owner (which the restore DAG hands it from the job).
RESTORE = OptionKeys("restore", "restore", names_are="the flags of s3arch restore and extract, same names",
                     docs="docs/RESTORE.md", also=("memory_budget", "expected_owner"), checked=True)


class S3ArchDeprecationWarning(DeprecationWarning, FutureWarning):
    """A spelling that stops working in the next release: a DeprecationWarning, as the amazon
    provider's ``AirflowProviderDeprecationWarning`` is, and a FutureWarning, as round 5's
    warnings were (so code that filtered or expected those still sees these)."""


def known_options(keys: OptionKeys = ARCHIVE) -> tuple[str, ...]:
    """The keys an operator's ``options`` may hold: an archive step's (the default), every
    option the table gives the archive steps (``operator="step"``), or ``RESTORE``'s."""
    return keys.names()


def checked_options(operator: str, options: Any, keys: OptionKeys = ARCHIVE) -> Any:
    """``options`` (a copy), each key one of ``keys``; a TypeError names an unknown key and the
    known ones. A template or an XComArg (anything not a mapping) is checked once it is
    rendered (``rendered_options``)."""
    if not isinstance(options, Mapping):
        return options
    known = known_options(keys)
    unknown = [str(name) for name in options if name not in known]
    if unknown:
        own = [name for name in unknown if name in keys.own]
        note = f" ({', '.join(own)}: an argument of the operators that take it, not an option)" if own else ""
        raise TypeError(f"{operator}: options has unknown key(s) {', '.join(map(repr, unknown))}{note}; the "
                        f"{keys.what} options are: {', '.join(known)} ({keys.docs})")
    return dict(options)


def rendered_options(operator: str, options: Any, keys: OptionKeys = ARCHIVE) -> dict[str, Any]:
    """The options of a task about to run (rendered): checked by name (and, where ``keys`` say,
    each value by the table's check: a number native rendering read from an account's digits
    is the account's text again), each one not given at its default."""
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise TypeError(f"{operator}: options must be a dict of {keys.what} options, not {type(options).__name__} "
                        f"{options!r}")
    given = checked_options(operator, options, keys)
    if keys.checked:
        taken = keys.options()
        given = {name: taken[name].job_value(value, f"{operator}: {name}") for name, value in given.items()}
    return {**keys.defaults(), **given}


def option_value(options: Any, name: str, keys: OptionKeys = ARCHIVE) -> Any:
    """One option's value in ``options``, else its default (before rendering too)."""
    if isinstance(options, Mapping) and name in options:
        return options[name]
    return keys.defaults()[name]


def moved_into_options(operator: str, options: Any, kwargs: dict[str, Any], keys: OptionKeys = ARCHIVE) -> Any:
    """``options`` with the options ``kwargs`` still gives the old way (a keyword argument of
    the option's name; an archive step's round 3 ``preview=`` or ``spec_options={...}``) moved
    in and popped from ``kwargs``, each old spelling warned about. An option given both ways is
    a TypeError."""
    renamed = keys.renamed
    old = [name for name in kwargs if name in known_options(keys) or name in renamed
           or name == keys.spec_options_kwarg]
    if not old:
        return options
    moved: dict[str, Any] = {}
    for name in old:
        value = kwargs.pop(name)
        if name == keys.spec_options_kwarg:
            if value:
                moved.update(_spec_options(operator, value))
        elif name in renamed:
            if value is not None and (renamed[name] in moved or renamed[name] in kwargs):
                raise TypeError(f"{operator}: {name} and {renamed[name]} given both: give {renamed[name]} in options")
            if value is not None:
                _warn(f"{operator}({name}=...) is deprecated and will stop working in the next release: use "
                      f"{renamed[name]}, a key of options={{...}}: options={{{renamed[name]!r}: ...}}")
                moved[renamed[name]] = value
        else:
            moved[name] = value
    keywords = [name for name in old if name in known_options(keys)]
    if keywords:
        spelled = ", ".join(f"{name!r}: ..." for name in keywords)
        _warn(f"{operator}({'=..., '.join(keywords)}=...): {keys.what} options as keyword arguments are deprecated "
              f"and will stop working in the next release: pass them as options={{{spelled}}} ({keys.names_are})")
    given = dict(options) if isinstance(options, Mapping) else {}
    twice = sorted(set(given) & set(moved))
    if twice or (moved and options is not None and not isinstance(options, Mapping)):
        raise TypeError(f"{operator}: {', '.join(twice) or 'options'} given both in options and as keyword "
                        "argument(s): give each in options only")
    return {**given, **moved}


def _spec_options(operator: str, spec_options: Mapping[str, Any]) -> dict[str, Any]:
    _warn(f"{operator}(spec_options=...) is deprecated and will stop working in the next release: use "
          f"{', '.join(table.SPEC_OPTIONS)}, keys of options={{...}} (the CLI's flags and the job's keys, same names)")
    unknown = set(spec_options) - set(table.SPEC_OPTIONS)
    if unknown:
        raise TypeError(f"{operator}: spec_options has unknown setting(s) {', '.join(sorted(unknown))}")
    return dict(spec_options)


def _warn(message: str) -> None:
    """Warn at the user's line: the first frame outside Airflow and this package."""
    level, frame = 1, sys._getframe(0)
    while frame is not None and frame.f_globals.get("__name__", "").startswith(("s3arch_airflow.", "airflow.")):
        level, frame = level + 1, frame.f_back  # type: ignore[assignment]
    warnings.warn(message, S3ArchDeprecationWarning, stacklevel=level)
