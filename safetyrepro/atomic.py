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
import errno
import io
import os
import secrets
import stat
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
    return UserError(f"{path} is a symbolic link; SafetyRepro never writes through links inside the folder it "
                     "writes to (the file it points to would change): remove the link and rerun")


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
                    raise UserError(f"{walked} is a file where SafetyRepro needs a folder; move it aside and rerun") \
                        from None
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


def atomic_write(path: Path | str, data: Data, root: Path | str | None = None) -> Path:
    """Write `data` (text, bytes, or a function that writes into a binary file object) to `path`, whole
    or not at all, never through a link at or below `root` (default: the file's own folder). The file
    gets the mode a plain open() would give. Returns the path."""
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
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
    return path


def ensure_dir(path: Path | str, root: Path | str | None = None) -> Path:
    """Create `path` (and the folders above it, from `root`) without following links."""
    path = Path(path)
    root = Path(root) if root is not None else path
    with open_dir(root, _relative(root, path)):
        pass
    return path


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
