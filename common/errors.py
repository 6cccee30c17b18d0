"""The project's one exception type for user mistakes (docs/design.md, section "Runs, records and launching")."""


class UserError(Exception):
    """A mistake the user can fix: bad flag values, missing data, a corrupt run directory.

    Raised deep in ``common/`` and turned into one line on stderr plus exit code 2 by
    :func:`common.cli.entry_point`. The message names the problem *and* the fix.
    Programming errors are never wrapped in this type; they keep their tracebacks.
    """


def one_of(flag: str, value: str, options: dict):
    """``options[value]``; else a :class:`UserError` naming the choices (``--preset huge: unknown preset; use ...``)."""
    if value not in options:
        raise UserError(f"{flag} {value}: unknown {flag.lstrip('-')}; use {' or '.join(options)}")
    return options[value]
