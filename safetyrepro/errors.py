"""The one exception type that reaches the user as a single line (and exit code 2)."""

import sys
from pathlib import Path


class UserError(Exception):
    """Bad input the user can act on: the message names the value and what is allowed."""


def one_of(kind: str, value: object, allowed) -> UserError:
    return UserError(f"unknown {kind} {value!r}; allowed: {', '.join(map(str, allowed))}")


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
