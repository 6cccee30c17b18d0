"""The project's one exception type for user mistakes (docs/design.md, section "Runs, records and launching")."""


class UserError(Exception):
    """A mistake the user can fix: bad flag values, missing data, a corrupt run directory.

    Raised deep in ``common/`` and turned into one line on stderr plus exit code 2 by
    :func:`common.launch.cli.entry_point`. The message names the problem *and* the fix.
    Programming errors are never wrapped in this type; they keep their tracebacks.
    """


class ParamError(UserError):
    """A bad value of one parameter of a planner or a preset, named by the parameter (``lr``, ``depths``).

    The modules below the command line are called from Python too, so they name what their caller passed, not a
    flag: ``str(exc)`` reads ``lr=-1: must be positive``. A script's command line words the same error with the
    flag that sets the parameter (``--lr -1: must be positive``): :func:`common.launch.cli.entry_point` looks the flag up
    in the parser, the one place where a parameter meets its flag (docs/design.md, section "Validation").
    """

    def __init__(self, param: str, shown: object, message: str):
        self.param, self.shown, self.message = param, str(shown), message
        super().__init__(f"{param}={self.shown}: {message}")

    def worded(self, flag: str) -> str:
        """The message as the command line shows it: ``--flag value: message``."""
        return f"{flag} {self.shown}: {self.message}"


def one_of(param: str, value: str, options: dict):
    """``options[value]``; else a :class:`ParamError` of ``param`` naming the choices (``preset=huge: unknown preset;
    use smoke or mini or paper``, on the command line ``--preset huge: ...``)."""
    if value not in options:
        raise ParamError(param, value, f"unknown {param}; use {' or '.join(options)}")
    return options[value]
