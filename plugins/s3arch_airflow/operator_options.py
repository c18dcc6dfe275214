"""The archive steps' ``options``: the job's archive options, by the option table's names
(tasks/core/options.py), checked by name; and the keyword spellings of earlier releases moved
into them for one more release, with a warning that names ``options={...}``.

An archive operator takes ``options`` as the amazon provider's operators take their
``extra_args``: one dict of settings (the job's ``operator_args``), templated as a whole,
beside the few arguments that are the task's own (``source_bucket``, ``destination``,
``prefix``, ``aws_conn_id``, ...). Nothing here touches S3 or imports the engine's heavy parts.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping
from typing import Any

from s3arch.core import options as table

# Round 3's spellings, for one more release (CHANGELOG.md, Deprecated): what replaced them.
RENAMED = {"preview": "dry_run"}
SPEC_OPTIONS_KWARG = "spec_options"

# The archive options that are an operator's own arguments, not keys of its ``options``.
OWN_ARGUMENTS = ("delete_source", "delete_versions", "segments")


class S3ArchDeprecationWarning(DeprecationWarning, FutureWarning):
    """A spelling that stops working in the next release: a DeprecationWarning, as the amazon
    provider's ``AirflowProviderDeprecationWarning`` is, and a FutureWarning, as round 5's
    warnings were (so code that filtered or expected those still sees these)."""


def known_options() -> tuple[str, ...]:
    """The keys an archive step's ``options`` may hold: every option the table gives the
    archive steps (``operator="step"``)."""
    return table.step_options()


def checked_options(operator: str, options: Any) -> Any:
    """``options`` (a copy), each key an archive step's option; a TypeError names an unknown key
    and the known ones. A template or an XComArg (anything not a mapping) is checked once it is
    rendered (``rendered_options``)."""
    if not isinstance(options, Mapping):
        return options
    known = known_options()
    unknown = [str(name) for name in options if name not in known]
    if unknown:
        own = [name for name in unknown if name in OWN_ARGUMENTS]
        note = f" ({', '.join(own)}: an argument of the operators that take it, not an option)" if own else ""
        raise TypeError(f"{operator}: options has unknown key(s) {', '.join(map(repr, unknown))}{note}; the "
                        f"archive options are: {', '.join(known)} (the job's keys: docs/JOBS.md, Settings)")
    return dict(options)


def rendered_options(operator: str, options: Any) -> dict[str, Any]:
    """The options of a task about to run (rendered): checked, each one not given at the job's
    default (``processes`` 1: one task, one process)."""
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise TypeError(f"{operator}: options must be a dict of archive options, not {type(options).__name__} "
                        f"{options!r}")
    return {**table.step_defaults(), **checked_options(operator, options)}


def option_value(options: Any, name: str) -> Any:
    """One option's value in ``options``, else its job default (before rendering too)."""
    if isinstance(options, Mapping) and name in options:
        return options[name]
    return table.step_defaults()[name]


def moved_into_options(operator: str, options: Any, kwargs: dict[str, Any]) -> Any:
    """``options`` with the archive options ``kwargs`` still gives the old way (a keyword
    argument of the option's name, round 3's ``preview=`` or ``spec_options={...}``) moved in
    and popped from ``kwargs``, each old spelling warned about. An option given both ways is a
    TypeError."""
    old = [name for name in kwargs if name in known_options() or name in RENAMED or name == SPEC_OPTIONS_KWARG]
    if not old:
        return options
    moved: dict[str, Any] = {}
    for name in old:
        value = kwargs.pop(name)
        if name == SPEC_OPTIONS_KWARG:
            if value:
                moved.update(_spec_options(operator, value))
        elif name in RENAMED:
            if value is not None and (RENAMED[name] in moved or RENAMED[name] in kwargs):
                raise TypeError(f"{operator}: {name} and {RENAMED[name]} given both: give {RENAMED[name]} in options")
            if value is not None:
                _warn(f"{operator}({name}=...) is deprecated and will stop working in the next release: use "
                      f"{RENAMED[name]}, a key of options={{...}}: options={{{RENAMED[name]!r}: ...}}")
                moved[RENAMED[name]] = value
        else:
            moved[name] = value
    keywords = [name for name in old if name in known_options()]
    if keywords:
        spelled = ", ".join(f"{name!r}: ..." for name in keywords)
        _warn(f"{operator}({'=..., '.join(keywords)}=...): archive options as keyword arguments are deprecated and "
              f"will stop working in the next release: pass them as options={{{spelled}}} (the job's keys, same names)")
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
