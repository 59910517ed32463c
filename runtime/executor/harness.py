"""The program-side harness of function tests (run in the sandbox after `values`' source).

argv: REQUEST_FD RESPONSE_FD ENTRY_POINT. It runs ``main.py`` as ``__main__`` and then
answers calls: each request line carries encoded arguments, each response line the encoded
return value (or the name of the exception raised). It declares no verdict and holds nothing
worth forging: the tests and their expected values live only in the judge process, which
compares the values it rebuilds. A program that takes over these pipes can only answer
calls, which is what it is asked to do anyway.
"""

import contextlib
import os
import sys
import traceback

MAX_MESSAGE = 64 * 1024 * 1024


def _serve(fn, requests, responses):
    import json

    for line in requests:
        if len(line) > MAX_MESSAGE:
            return
        try:
            call = json.loads(line)
            args = [decode_value(a) for a in call["args"]]  # noqa: F821 (from values)
            kwargs = {k: decode_value(v) for k, v in call["kwargs"].items()}  # noqa: F821
            result = fn(*args, **kwargs)
            reply = dumps({"ok": encode_value(result)})  # noqa: F821 (from values)
        except ValueCodecError as exc:  # noqa: F821 (from values)
            reply = dumps({"bad": str(exc)[:500]})  # noqa: F821
        except RecursionError:
            reply = dumps({"raise": "RecursionError", "msg": ""})  # noqa: F821
        except BaseException as exc:  # the program's own exception, passed on by name
            if isinstance(exc, SystemExit | KeyboardInterrupt):
                raise
            traceback.print_exc()
            reply = dumps({"raise": type(exc).__name__, "msg": str(exc)[:500]})  # noqa: F821
        if len(reply) > MAX_MESSAGE:
            reply = dumps({"bad": "the return value is too large"})  # noqa: F821
        responses.write(reply + "\n")
        responses.flush()


def _main():
    sys.set_int_max_str_digits(0)
    request_fd, response_fd, entry = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    sys.argv[:] = ["main.py"]
    requests = os.fdopen(request_fd, "r", encoding="utf-8")
    responses = os.fdopen(response_fd, "w", encoding="utf-8")
    with open("main.py", encoding="utf-8") as fh:
        source = fh.read()
    sys.path.insert(0, os.getcwd())
    scope = {"__name__": "__main__", "__file__": "main.py", "__builtins__": __builtins__}
    try:
        exec(compile(source, "main.py", "exec"), scope)
    except SystemExit as exc:
        print(f"program exited ({exc.code}) before the tests ran", file=sys.stderr)
        os._exit(1)
    except BaseException as exc:
        traceback.print_exc()
        print(f"program raised {type(exc).__name__} before the tests ran", file=sys.stderr)
        os._exit(1)
    fn = scope.get(entry)
    if not callable(fn):
        print(f"program does not define {entry}()", file=sys.stderr)
        os._exit(1)
    try:
        _serve(fn, requests, responses)
    except BaseException:
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


if __name__ == "__main__":
    _main()
