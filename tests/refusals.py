"""The failure catalogues' check of a refusal, imported by name: the command run in-process exits 2 with
exactly one stderr line, holding every expected piece and no traceback."""

from __future__ import annotations

from safetyrepro.cli import main


def refused(argv, capsys, *expect: str) -> str:
    """Exit 2 and exactly one stderr line holding every `expect`; returns that line."""
    capsys.readouterr()
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1, err
    assert "internal error" not in err and "Traceback" not in err, err
    for e in expect:
        assert e in lines[0], (e, lines[0])
    return lines[0]
