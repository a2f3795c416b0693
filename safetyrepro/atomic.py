"""Every file SafetyRepro writes goes through here: whole or not at all, and inside the folder the
user named.

`atomic_write(path, data, root=...)` writes a temporary file beside the target, fsyncs it and renames
it over the target name. The walk from `root` (the folder the user gave: --out, the cache, the
store) down to the file's folder opens each folder with O_NOFOLLOW relative to the one above it
(`dir_fd`), so a symbolic link planted anywhere below `root` is refused, never followed, even if it
appears between a check and the write; the final rename replaces a link at the target name itself
instead of writing through it. `root` itself may be a link: the user named it.

A refusal is a UserError (one line, exit 2) that names the link and says to remove it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import io
import json
import os
import re
import secrets
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from safetyrepro.errors import UserError

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
DIRECTORY = getattr(os, "O_DIRECTORY", 0)
TMP_SUFFIX = ".tmp"

Data = str | bytes | Callable[[BinaryIO], None]


def _umask_mode(mode: int = 0o666) -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mode & ~mask


def link_refused(path: Path) -> UserError:
    return UserError(
        f"{path} is a symbolic link; SafetyRepro never writes through links inside the folder it "
        "writes to (the file it points to would change): remove the link and rerun"
    )


def _relative(root: Path, path: Path) -> tuple[str, ...]:
    root_abs = Path(os.path.abspath(root))
    path_abs = Path(os.path.abspath(path))
    try:
        rel = path_abs.relative_to(root_abs)
    except ValueError:
        raise UserError(f"{path} is outside {root}; SafetyRepro writes only inside the folder it was given") from None
    if any(p == ".." for p in rel.parts):
        raise UserError(f"{path} leaves {root}; SafetyRepro writes only inside the folder it was given")
    return rel.parts


@contextlib.contextmanager
def open_dir(root: Path, parts: tuple[str, ...], create: bool = True) -> Iterator[int]:
    """A file descriptor of root/parts[0]/.../parts[-1], each step opened without following links
    (created when missing with `create`). The caller's operations use it as `dir_fd`."""
    root = Path(root)
    if create:
        root.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(root, os.O_RDONLY | DIRECTORY)
    except NotADirectoryError:
        raise UserError(f"{root} is a file, not a folder; choose another folder") from None
    walked = root
    try:
        for name in parts:
            walked = walked / name
            if create:
                try:
                    os.mkdir(name, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                nxt = os.open(name, os.O_RDONLY | DIRECTORY | NOFOLLOW, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(fd, name):
                    raise link_refused(walked) from None
                if e.errno == errno.ENOTDIR:
                    raise UserError(
                        f"{walked} is a file where SafetyRepro needs a folder; move it aside and rerun"
                    ) from None
                raise
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def atomic_write(
    path: Path | str, data: Data, root: Path | str | None = None, check: Callable[[Path], object] | None = None
) -> Path:
    """Write `data` (text, bytes, or a function that writes into a binary file object) to `path`, whole
    or not at all, never through a link at or below `root` (default: the file's own folder). The file
    gets the mode a plain open() would give. `check`, when given, reads the written file (its temporary
    path) before it takes the name: an exception there, or in `data`, leaves `path` as it was (a download
    or a join whose checksum or format is wrong). Returns the path."""
    path = Path(path)
    root = Path(root) if root is not None else path.parent
    parts = _relative(root, path)
    if not parts:
        raise UserError(f"{path} is the output folder itself, not a file in it")
    *folders, name = parts
    with open_dir(root, tuple(folders)) as dfd:
        tmp = f".{name}.{secrets.token_hex(4)}{TMP_SUFFIX}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600, dir_fd=dfd)
        try:
            with io.FileIO(fd, "w", closefd=True) as raw, io.BufferedWriter(raw) as f:
                if isinstance(data, str):
                    f.write(data.encode("utf-8"))
                elif isinstance(data, (bytes, bytearray, memoryview)):
                    f.write(data)
                else:
                    data(f)
                f.flush()
                os.fsync(raw.fileno())
                os.chmod(raw.fileno(), _umask_mode())
            if check is not None:
                check(root.joinpath(*folders, tmp))
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            if isinstance(e, OSError) and e.filename in (None, tmp):
                e.filename = str(path)  # a full disk names the file being written, not its temporary
            raise
    return path


def ensure_dir(path: Path | str, root: Path | str | None = None) -> Path:
    """Create `path` (and the folders above it, from `root`) without following links."""
    path = Path(path)
    root = Path(root) if root is not None else path
    with open_dir(root, _relative(root, path)):
        pass
    return path


def replace_folder(out: Path, write: Callable[[Path], None], keep: Callable[[Path], bool] | None = None) -> Path:
    """`write(tmp)` into a fresh sibling folder, then put it in place of `out`: a crash leaves `out` as it
    was. With `keep`, an `out` for which `keep(out)` holds (another process's finished copy) stays in place.
    For a cache's folders (the model cache's HF folders); a command's output folder is `staged_output`'s."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}{TMP_SUFFIX}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        write(tmp)
        if out.exists() and not (keep and keep(out)):
            shutil.rmtree(out, ignore_errors=keep is not None)  # a reader may hold files of a shared folder
        try:
            os.replace(tmp, out)
        except OSError:  # another process put its copy in place first
            if not (keep and keep(out)):
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out


def check_no_links(root: Path | str, *paths: Path | str) -> None:
    """Refuse (UserError) if any existing component between `root` and each of `paths` is a link:
    for code that hands a path to a library which opens it itself."""
    root = Path(root)
    for p in paths:
        walked = root
        for name in _relative(root, Path(p)):
            walked = walked / name
            if walked.is_symlink():
                raise link_refused(walked)
            if not walked.exists():
                break


def open_nofollow(path: Path | str, flags: int, mode: int = 0o666, root: Path | str | None = None) -> int:
    """os.open of a file inside `root` (default its folder) that refuses a link at any step."""
    path = Path(path)
    root = Path(root) if root is not None else path.parent
    *folders, name = _relative(root, path)
    with open_dir(root, tuple(folders)) as dfd:
        try:
            return os.open(name, flags | NOFOLLOW, mode, dir_fd=dfd)
        except OSError as e:
            if e.errno == errno.ELOOP or _is_link(dfd, name):
                raise link_refused(path) from None
            raise


def replace_within(src: Path | str, dst: Path | str, root: Path | str) -> None:
    """Rename `src` to `dst`, both inside `root`, never through a link in a folder above them."""
    src, dst = Path(src), Path(dst)
    *sf, sname = _relative(Path(root), src)
    *df, dname = _relative(Path(root), dst)
    with open_dir(Path(root), tuple(sf), create=False) as sfd, open_dir(Path(root), tuple(df)) as dfd:
        os.replace(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)


def remove_within(path: Path | str, root: Path | str) -> None:
    """Delete the file `path` inside `root` if it is there (a link there is removed, never its target;
    a linked folder above it is refused)."""
    *folders, name = _relative(Path(root), Path(path))
    try:
        with open_dir(Path(root), tuple(folders), create=False) as dfd:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dfd)
    except FileNotFoundError:  # a folder on the way is missing: nothing to remove
        pass


def refuse_links_under(root: Path | str, own: tuple[str, ...] = ()) -> None:
    """Refuse (UserError naming the first one) any symbolic link inside `root`: for a command whose
    foreign packages write into the folder themselves, checked before anything is written. `own`:
    folders (relative to root) whose links SafetyRepro made itself and never writes through (HELM's
    model folder of links to the cached weights); they are not looked into."""
    root = Path(root)
    if not root.is_dir():
        return
    for folder, dirs, files in os.walk(root, followlinks=False):
        rel = Path(folder).relative_to(root).as_posix()
        if any(rel == o or rel.startswith(o + "/") for o in own):
            dirs[:] = []
            continue
        for name in sorted(dirs + files):
            p = Path(folder) / name
            if p.is_symlink():
                raise link_refused(p)


def open_text_nofollow(path: Path | str, mode: str = "w", root: Path | str | None = None):
    """A text file object for writing ("w") or appending ("a") that refuses a link at any step; for
    logs and append-only files that a rename cannot replace."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "a" else os.O_TRUNC)
    return os.fdopen(open_nofollow(path, flags, 0o666, root=root), mode, encoding="utf-8")


# -- a command's whole output folder: whole or untouched ------------------------------------------
#
# A command that writes a set of files (analyze, compare, import, models export) builds the whole set in
# a hidden sibling of the folder the user named, `.<name>.safetyrepro-staging-<pid>-<hex>` (same
# parent, so the same file system), writes the marker file MARKER last into it, and then swaps it in
# with one atomic exchange of the two folders (renameat2 RENAME_EXCHANGE; where the file system lacks
# it, two renames through `.<name>.safetyrepro-aside-<pid>-<hex>`). The earlier folder is removed
# afterwards. At any kill the named folder holds the complete earlier output or the complete new one;
# a rerun removes the hidden siblings a dead run left (and, after a kill between the two fallback
# renames, puts the earlier folder back first).

MARKER = ".safetyrepro-output.json"
MARKER_FORMAT = 1
_SIBLING = re.compile(r"^\.(?P<name>.+)\.safetyrepro-(?P<kind>staging|aside)-(?P<pid>\d+)-[0-9a-f]{8}$")
_LEFTOVER_TMP = re.compile(r"^\..+\.[0-9a-f]{8}" + re.escape(TMP_SUFFIX) + "$")  # atomic_write's temporaries
RENAME_EXCHANGE = 2
Legacy = Callable[[Path, list[str]], "set[str] | None"]


def read_marker(folder: Path | str) -> dict | None:
    """The marker of an earlier output in `folder` ({"command": ..., "files": [...]}), or None."""
    try:
        fd = open_nofollow(Path(folder) / MARKER, os.O_RDONLY, root=folder)
    except (OSError, UserError):
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            doc = json.loads(f.read(1 << 20))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("command"), str) or not isinstance(doc.get("files"), list):
        return None
    return doc


def marker_text(command: str, files: list[str]) -> str:
    return (
        json.dumps(
            {
                "safetyrepro_output": MARKER_FORMAT,
                "command": command,
                "note": f"written by `safetyrepro {command}`, which replaces this folder as a whole when it is run "
                "again into it; it refuses a folder holding any file that is not listed here",
                "files": sorted(files),
            },
            indent=1,
        )
        + "\n"
    )


def _files_under(folder: Path) -> list[str]:
    """Every file below `folder` (relative, posix), links not followed (they were refused before)."""
    found = []
    for here, dirs, files in os.walk(folder, followlinks=False):
        rel = Path(here).relative_to(folder)
        found += [(rel / f).as_posix() for f in files]
        dirs.sort()
    return sorted(found)


def _is_carried(p: Path, carry: Callable[[Path], bool] | None) -> bool:
    """Whether the entry `p` of an output folder is kept in place through a swap: a subfolder with its
    own marker, or a folder or file that `carry` recognises (certify's lock file, held open while the
    folder is swapped: moved, it stays the same file, so the lock holds)."""
    if p.is_symlink():
        return False
    if p.is_dir():
        return read_marker(p) is not None or (carry is not None and carry(p))
    return p.is_file() and carry is not None and carry(p)


def _carried(folder: Path, ours: set[str], carry: Callable[[Path], bool] | None) -> list[str]:
    """Entries of `folder` kept in place: other outputs of SafetyRepro (`import --out DIR` then
    `analyze --out DIR/analysis`), or what `carry` recognises (see _is_carried)."""
    kept = []
    for entry in sorted(os.listdir(folder)):
        p = folder / entry
        if not any(f == entry or f.startswith(entry + "/") for f in ours) and _is_carried(p, carry):
            kept.append(entry)
    return kept


def _target(out: Path) -> Path:
    """The folder to replace: `out` itself, or where it points if the user named a link."""
    out = Path(os.path.abspath(out))
    return Path(os.path.realpath(out)) if out.is_symlink() else out


def check_output_set(
    out: Path | str,
    command: str,
    *,
    legacy: Legacy | None = None,
    carry: Callable[[Path], bool] | None = None,
    own_links: tuple[str, ...] = (),
    what: str = "--out",
) -> None:
    """Read-only, before any work: refuse (UserError, one line) an output folder that is a file, holds
    a link, or holds a file that no earlier `safetyrepro COMMAND` wrote. An earlier output is
    recognised by its MARKER (command and files), or, for folders written before markers, by
    `legacy(folder, files)` returning the files it owns (None: not recognised). Subfolders that are
    other outputs (their own marker, or `carry(subfolder)`) are kept as they are. `own_links`: as for
    refuse_links_under. A missing or empty folder is fine."""
    out = Path(out)
    if out.is_symlink() and not out.exists():
        raise UserError(f"{what} {out} is a link to nothing; give an existing folder or a new name")
    if out.exists() and not out.is_dir():
        raise UserError(f"{what} {out} is a file, not a folder; choose another {what}")
    if not out.exists():
        return
    if Path(os.path.realpath(os.getcwd())).is_relative_to(os.path.realpath(out)):
        raise UserError(
            f"{what} {out} is the current folder or holds it; SafetyRepro replaces the folder it writes "
            f"as a whole: name a new folder below it"
        )
    refuse_links_under(out, own=own_links)
    files = _files_under(out)
    if not files:
        return
    marker = read_marker(out)
    if marker is not None:
        if marker["command"] != command:
            raise UserError(
                f"{what} {out} holds the output of `safetyrepro {marker['command']}` ({MARKER}); "
                f"`safetyrepro {command}` would replace it: choose another {what}"
            )
        ours = {str(f) for f in marker["files"]} | {MARKER}
    else:
        ours = (legacy(out, files) if legacy is not None else None) or set()
    kept = _carried(out, ours, carry)
    foreign = [
        f
        for f in files
        if f not in ours and f.split("/")[0] not in kept and not _LEFTOVER_TMP.match(f.rsplit("/", 1)[-1])
    ]
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise UserError(
            f"{what} {out} holds {foreign[0]}{more}, which no earlier `safetyrepro {command}` wrote "
            f"(one is recognised by its {MARKER}); SafetyRepro never replaces files it did not write: "
            f"choose another {what}, or move them"
        )


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # an earlier call in this process that could not clean up
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


def _rmtree(name: str, dir_fd: int) -> None:
    if _exists(name, dir_fd):
        if sys.version_info >= (3, 11):
            shutil.rmtree(name, dir_fd=dir_fd)  # fd-based: never follows a link out
        else:  # Python 3.10: no dir_fd; rmtree still does not follow links on Linux
            shutil.rmtree(os.path.join(f"/proc/self/fd/{dir_fd}", name))


def _exchange(dir_fd: int, a: str, b: str) -> bool:
    """Swap the folders `a` and `b` of `dir_fd` in one step; False where the system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    if fn(dir_fd, os.fsencode(a), dir_fd, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), b)


def _move_carried(src_fd: int, dst_fd: int, names: list[str]) -> None:
    for n in names:
        if _exists(n, src_fd) and not _exists(n, dst_fd):
            os.rename(n, n, src_dir_fd=src_fd, dst_dir_fd=dst_fd)


def _fsync_fd(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.fsync(fd)


def recover_output(
    parent_fd: int, name: str, carry: Callable[[Path], bool] | None = None, parent: Path | None = None
) -> None:
    """Tidy what a killed run into `name` left beside it: put an earlier folder set aside back when
    `name` is missing, move other outputs carried into a staging folder back, and remove the staging
    and aside folders of runs that are no longer alive."""
    siblings = []
    for entry in os.listdir(parent_fd):
        m = _SIBLING.match(entry)
        if m and m["name"] == name and not _alive(int(m["pid"])):
            siblings.append((m["kind"] != "aside", entry))  # asides first
    for staging, entry in sorted(siblings):
        if not staging and not _exists(name, parent_fd):
            os.rename(entry, name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
            continue
        if _exists(name, parent_fd) and parent is not None:
            with open_dir(parent, (entry,), create=False) as sfd, open_dir(parent, (name,), create=False) as ofd:
                back = [n for n in sorted(os.listdir(sfd)) if _is_carried(parent / entry / n, carry)]
                _move_carried(sfd, ofd, back)
        _rmtree(entry, parent_fd)


@contextlib.contextmanager
def staged_output(
    out: Path | str,
    command: str,
    *,
    legacy: Legacy | None = None,
    carry: Callable[[Path], bool] | None = None,
    own_links: tuple[str, ...] = (),
    what: str = "--out",
    marker: bool = True,
) -> Iterator[Path]:
    """Build a command's whole output in a fresh staging folder (yielded: write into it with
    atomic_write(..., root=stage)) and, when the block ends without an error, put it in place of `out`
    in one step (see above). On an error `out` is left as it was; an OSError becomes a UserError that
    names the file (under `out`) and says so. `out` is checked as check_output_set does, again here.
    `marker=False`: a format whose folder another tool reads, and that is recognised by `legacy` alone,
    gets no MARKER (an Every Eval Ever export)."""
    out = Path(out)
    target = _target(out)
    parent, name = target.parent, target.name
    try:
        parent.mkdir(parents=True, exist_ok=True)
        pfd = os.open(parent, os.O_RDONLY | DIRECTORY)
    except OSError as e:
        raise UserError(f"cannot create the folder {parent} for {what} {out}: {e.strerror}") from None
    stage_name = f".{name}.safetyrepro-staging-{os.getpid()}-{secrets.token_hex(4)}"
    stage = parent / stage_name
    made = moved = False
    carried: list[str] = []
    try:
        recover_output(pfd, name, carry, parent)
        check_output_set(out, command, legacy=legacy, carry=carry, own_links=own_links, what=what)
        os.mkdir(stage_name, 0o777, dir_fd=pfd)
        made = True
        yield stage
        files = _files_under(stage)
        if marker:
            atomic_write(stage / MARKER, marker_text(command, files), root=stage)
        if _exists(name, pfd) and os.path.isdir(target):
            with contextlib.suppress(OSError):
                os.chmod(stage_name, stat.S_IMODE(os.stat(name, dir_fd=pfd).st_mode), dir_fd=pfd)
            carried = _carried(target, set(files), carry)
            if carried:
                with (
                    open_dir(parent, (name,), create=False) as ofd,
                    open_dir(parent, (stage_name,), create=False) as sfd,
                ):
                    moved = True
                    _move_carried(ofd, sfd, carried)
        with open_dir(parent, (stage_name,), create=False) as sfd:
            _fsync_fd(sfd)
        old = _swap(pfd, stage_name, name)
        made = moved = False  # in place: from here on nothing is undone
        _fsync_fd(pfd)
        if old:
            with contextlib.suppress(OSError):
                _rmtree(old, pfd)
    except BaseException as e:
        if made:
            with contextlib.suppress(OSError, UserError):
                if moved:
                    with (
                        open_dir(parent, (stage_name,), create=False) as sfd,
                        open_dir(parent, (name,), create=False) as ofd,
                    ):
                        _move_carried(sfd, ofd, carried)
                _rmtree(stage_name, pfd)
        if isinstance(e, OSError):
            raise UserError(_unwritten(e, stage, out)) from None
        raise
    finally:
        os.close(pfd)


def _swap(pfd: int, stage_name: str, name: str) -> str | None:
    """Put `stage_name` in place of `name`; returns the name the earlier folder now has, if any."""
    try:
        os.rename(stage_name, name, src_dir_fd=pfd, dst_dir_fd=pfd)  # `name` missing, or an empty folder
        return None
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    if _exchange(pfd, stage_name, name):
        return stage_name
    aside = stage_name.replace(".safetyrepro-staging-", ".safetyrepro-aside-")
    os.rename(name, aside, src_dir_fd=pfd, dst_dir_fd=pfd)
    os.rename(stage_name, name, src_dir_fd=pfd, dst_dir_fd=pfd)
    return aside


def _unwritten(e: OSError, stage: Path, out: Path) -> str:
    what = e.strerror or str(e)
    path = str(e.filename or "")
    if path.startswith(str(stage)):
        path = str(out) + path[len(str(stage)) :]
    hint = "free disk space and rerun" if e.errno == errno.ENOSPC else "rerun once that is fixed"
    return f"cannot write {path or out}: {what}; {out} is left as it was (nothing of this run was put in place): {hint}"
