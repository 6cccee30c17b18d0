"""Run numbered scripts as a shell runs them, several in one interpreter: ``python -m tests.helpers.as_shell``.

Reads a JSON list of ``[script file, argv, stderr file]`` on stdin; runs each script file as ``__main__``
(:func:`runpy.run_path`, ``sys.argv`` set as a shell sets it) with file descriptor 2 sent to its stderr file, so
whatever the script or a C library writes there is caught; prints a JSON list of exit codes. An uncaught
exception prints its traceback to that file and gives code 1, as the interpreter would. One interpreter start
instead of one per script: the bad-input tests' real-process cases share it (each script's own ``__main__``
block, exit code and stderr, without ten interpreters importing torch).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import traceback


def run_as_main(script: str, argv: list[str], stderr_path: str) -> int:
    sys.stderr.flush()
    saved = os.dup(2)
    with open(stderr_path, "w") as err:
        os.dup2(err.fileno(), 2)
    sys.argv = [script, *argv]
    try:
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:  # reported as the interpreter would
        traceback.print_exc()
        code = 1
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
    return code


if __name__ == "__main__":
    cases = json.load(sys.stdin)
    print(json.dumps([run_as_main(*case) for case in cases]))
