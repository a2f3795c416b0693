"""The one exception type that reaches the user as a single line (and exit code 2)."""


class UserError(Exception):
    """Bad input the user can act on: the message names the value and what is allowed."""


def one_of(kind: str, value: object, allowed) -> UserError:
    return UserError(f"unknown {kind} {value!r}; allowed: {', '.join(map(str, allowed))}")
