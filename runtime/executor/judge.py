"""The judge of function tests (run by the service after `values`' source, never sandboxed
with the program): it alone holds the test code and decides the verdict.

argv: REQUEST_FD RESPONSE_FD STATUS_FD ENTRY_POINT; ``context.py`` (the trusted prompt,
may be empty) and ``test.py`` in the working directory. The entry point is bound to a proxy
that sends encoded arguments to the sandboxed program and rebuilds its answer as fresh
built-in values, so every comparison the tests make runs here on plain data. The verdict
goes to STATUS_FD, which only the service holds.
"""

import builtins
import contextlib
import json
import os
import sys

MAX_MESSAGE = 64 * 1024 * 1024


class ProgramGone(BaseException):  # noqa: N818 (reported by name)
    """The program exited or closed its pipe before answering (a BaseException, and also
    remembered in `_FAULTS`, so a test's ``except Exception`` cannot turn it into a pass)."""


class BadAnswer(BaseException):  # noqa: N818
    """The program answered with something that is not a plain value."""


_FAULTS = []


class Test(Exception):  # noqa: N818
    """The test itself could not be run (a fault of the data, not of the program)."""


def _proxy(requests, responses):
    def candidate(*args, **kwargs):
        if _FAULTS:
            raise _FAULTS[0]
        try:
            call = {
                "args": [encode_value(a) for a in args],  # noqa: F821 (from values)
                "kwargs": {str(k): encode_value(v) for k, v in kwargs.items()},  # noqa: F821
            }
        except ValueCodecError as exc:  # noqa: F821 (from values)
            raise Test(f"the test passes an argument that is not a plain value: {exc}") from None
        try:
            requests.write(dumps(call) + "\n")  # noqa: F821 (from values)
            requests.flush()
        except (BrokenPipeError, OSError):
            _FAULTS.append(ProgramGone("the program exited before answering"))
            raise _FAULTS[0] from None
        line = responses.readline(MAX_MESSAGE + 1)
        if not line.endswith("\n"):
            _FAULTS.append(ProgramGone("the program exited before answering"))
            raise _FAULTS[0]
        try:
            reply = json.loads(line)
            if not isinstance(reply, dict):
                raise ValueError("not an object")
            if "ok" in reply:
                return decode_value(reply["ok"])  # noqa: F821 (from values)
        except ValueError as exc:  # ValueCodecError included
            _FAULTS.append(BadAnswer(f"the program's answer is not a plain value: {exc}"[:500]))
            raise _FAULTS[0] from None
        if "bad" in reply:
            _FAULTS.append(
                BadAnswer(f"returned a value that is not plain data: {reply['bad']}"[:500])
            )
            raise _FAULTS[0]
        name = reply.get("raise")
        kind = getattr(builtins, name, None) if isinstance(name, str) else None
        if not (isinstance(kind, type) and issubclass(kind, Exception)):
            kind = RuntimeError
        raise kind(str(reply.get("msg", ""))[:500])

    return candidate


def _main():
    sys.set_int_max_str_digits(0)
    request_fd, response_fd, status_fd = (int(a) for a in sys.argv[1:4])
    entry = sys.argv[4]
    requests = os.fdopen(request_fd, "w", encoding="utf-8")
    responses = os.fdopen(response_fd, "r", encoding="utf-8")
    with open("context.py", encoding="utf-8") as fh:
        context = fh.read()
    with open("test.py", encoding="utf-8") as fh:
        test = fh.read()
    candidate = _proxy(requests, responses)
    scope = {"__name__": "__main__", "__builtins__": builtins}
    status, detail = "ok", ""
    try:
        try:
            exec(compile(context, "prompt.py", "exec"), scope)
        except BaseException as exc:
            raise Test(f"the prompt raised {type(exc).__name__}: {exc}") from None
        scope[entry] = candidate
        try:
            exec(compile(test, "test.py", "exec"), scope)
        except BaseException as exc:
            raise Test(f"the test code raised {type(exc).__name__}: {exc}") from None
        check = scope.get("check")
        if not callable(check):
            raise Test("the test code defines no check(candidate)")
        check(candidate)
        if _FAULTS:
            raise _FAULTS[0]
    except ProgramGone as exc:
        status, detail = "gone", str(exc)
    except BadAnswer as exc:
        status, detail = "bad", str(exc)
    except Test as exc:
        status, detail = "test", str(exc)
    except AssertionError:
        status, detail = "assert", "assertion failed"
    except BaseException as exc:
        status, detail = "exc", type(exc).__name__
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os.write(status_fd, (json.dumps({"status": status, "detail": detail[:500]}) + "\n").encode())
    os._exit(0)


if __name__ == "__main__":
    _main()
