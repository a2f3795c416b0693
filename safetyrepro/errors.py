"""The one exception type that reaches the user as a single line (and exit code 2), and the one way any
exception is written as a line."""

import difflib
import sys
from pathlib import Path


class UserError(Exception):
    """Bad input the user can act on: the message names the value and what is allowed."""


def error_line(e: BaseException, with_type: bool = True, most: int | None = None) -> str:
    """An exception as one line: a UserError's own first line (it is written for people); any other's
    first line after `module.Type: ` (what a failed cell records, whichever executor ran it), or with
    `with_type=False` its first line alone (its type's name when it says nothing), for a message that
    says itself what failed. `most`: the first line cut to that many characters (a foreign parser's
    message quoted inside one of ours)."""
    lines = str(e).strip().splitlines()
    first = (lines[0] if lines else "")[:most]
    if isinstance(e, UserError):
        return first
    if with_type:
        return f"{type(e).__module__}.{type(e).__name__}: {first}"
    return first or type(e).__name__


def nearest(value: object, allowed) -> str | None:
    """The allowed name nearest a mistyped one (difflib's ratio, case ignored: `XSTest` is `xstest`), or
    None when none is near: a guess only where the typo is plain."""
    names = {str(a).lower(): str(a) for a in allowed}
    close = difflib.get_close_matches(str(value).lower(), list(names), n=1)
    return names[close[0]] if close and names[close[0]] != str(value) else None


def did_you_mean(value: object, allowed) -> str:
    """` (did you mean 'x'?)` for `nearest`, or ""."""
    near = nearest(value, allowed)
    return f" (did you mean {near!r}?)" if near is not None else ""


def one_of(kind: str, value: object, allowed) -> UserError:
    return UserError(f"unknown {kind} {value!r}{did_you_mean(value, allowed)}; allowed: {', '.join(map(str, allowed))}")


def _in_lm_eval_cli() -> bool:
    main = sys.modules.get("__main__")
    return Path(sys.argv[0]).name in ("lm_eval", "lm-eval") or (getattr(main, "__package__", None) or "").startswith(
        "lm_eval"
    )


def refuse(e: UserError):
    """Under lm-eval's command line, a bad SafetyRepro argument is one line on stderr and exit code 2
    (lm-eval would print a traceback); elsewhere the UserError propagates."""
    if _in_lm_eval_cli():
        sys.stderr.write(f"safetyrepro: error: {e}\n")
        raise SystemExit(2)
    raise e
