"""An Inspect `.eval` log (a zip archive) checked before Inspect reads it: every member is expanded with a
decompressor that counts the bytes it produces, so an archive bomb stops at its cap (docs/formats.md,
"Limits on untrusted input")."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from collections.abc import Iterator

from safetyrepro.limits import (
    MAX_ARCHIVE_BYTES,
    MAX_MEMBER_BYTES,
    MAX_MEMBERS,
    Refused,
    check_json_text,
    decode_text,
    shorten,
)

CHUNK = 8 << 20  # bytes expanded per step: the cap is checked after each
STORED, DEFLATED, ZSTD = 0, 8, 93
METHODS = {STORED: "stored", DEFLATED: "deflate", ZSTD: "zstd"}
LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # zipfile's sizeFileHeader layout (30 bytes)
KEEP = ("header.json", "_journal/start.json")  # members the importer reads itself (the format version)


def _declared_entries(data: bytes) -> int | None:
    """The entry count the end-of-central-directory record declares, before zipfile builds them all."""
    find = getattr(zipfile, "_EndRecData", None)
    if find is None:
        return None
    try:
        end = find(io.BytesIO(data))
    except (OSError, struct.error, ValueError):
        return None
    # private constant (the entry count's index in the end record), not in typeshed's zipfile
    return int(end[zipfile._ECD_ENTRIES_TOTAL]) if end else None  # type: ignore[attr-defined]


def _raw(data: memoryview, info: zipfile.ZipInfo) -> memoryview:
    start = info.header_offset
    try:
        fields = LOCAL_HEADER.unpack_from(data, start)
    except struct.error:
        fields = None
    if fields is None or fields[0] != b"PK\x03\x04":
        raise Refused(f"member {shorten(info.filename)} has no local header (a damaged archive)")
    begin = start + LOCAL_HEADER.size + fields[10] + fields[11]
    raw = data[begin : begin + info.compress_size]
    if len(raw) < info.compress_size:
        raise Refused(f"member {shorten(info.filename)} is cut short (a truncated archive)")
    return raw


def _expand(raw: memoryview, info: zipfile.ZipInfo, budget: int) -> bytes:
    """The member's bytes, refused once they pass MAX_MEMBER_BYTES or the archive's remaining budget."""
    cap = min(MAX_MEMBER_BYTES, budget)
    name = shorten(info.filename)
    if cap < MAX_MEMBER_BYTES:
        over = f"expands to more than {MAX_ARCHIVE_BYTES} bytes in all (the cap MAX_ARCHIVE_BYTES), passed in member "
        over += name
    else:
        over = f"member {name} expands to more than {MAX_MEMBER_BYTES} bytes (the cap MAX_MEMBER_BYTES)"

    def pieces() -> Iterator[bytes]:
        if info.compress_type == STORED:
            yield bytes(raw)
        elif info.compress_type == DEFLATED:
            d = zlib.decompressobj(-15)
            buf = bytes(raw)
            while buf:
                yield d.decompress(buf, CHUNK)
                buf = d.unconsumed_tail
            yield d.flush()
        else:  # zstd, as Inspect 0.3 writes it (one or several frames)
            import zstandard

            reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw), read_across_frames=True)
            while piece := reader.read(CHUNK):
                yield piece

    out = bytearray()
    try:
        for piece in pieces():
            out += piece
            if len(out) > cap:  # checked after each bounded step, before the next is expanded
                raise Refused(over + ": an archive bomb or not an Inspect log")
    except Refused:
        raise
    except Exception as e:  # zlib.error, zstandard.ZstdError: a damaged member
        raise Refused(f"member {name} cannot be expanded ({type(e).__name__}: {shorten(str(e), 120)})") from None
    return bytes(out)


def iter_members(data: bytes):
    """(name, expanded bytes) of each member of an `.eval` archive, in order, refused (`Refused`) at the
    first cap or oddity (docs/formats.md)."""
    declared = _declared_entries(data)
    if declared is not None and declared > MAX_MEMBERS:
        raise Refused(f"declares {declared} members; at most {MAX_MEMBERS} (the cap MAX_MEMBERS)")
    try:
        infos = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, struct.error, NotImplementedError) as e:
        raise Refused(f"is not a readable Inspect log (not a zip archive: {shorten(str(e), 120)})") from None
    if len(infos) > MAX_MEMBERS:
        raise Refused(f"holds {len(infos)} members; at most {MAX_MEMBERS} (the cap MAX_MEMBERS)")
    seen: set[str] = set()
    for info in infos:
        if info.filename in seen:
            raise Refused(
                f"holds two members named {shorten(info.filename)}: a reader would take one of them "
                "silently (a damaged or forged log)"
            )
        seen.add(info.filename)
    view = memoryview(data)
    budget = MAX_ARCHIVE_BYTES
    for info in infos:
        name = shorten(info.filename)
        if info.flag_bits & 0x1:
            raise Refused(f"member {name} is encrypted: not an Inspect log")
        if info.compress_type not in METHODS:
            raise Refused(
                f"member {name} uses zip compression method {info.compress_type}; Inspect logs use "
                f"{', '.join(METHODS.values())}"
            )
        if info.file_size > MAX_MEMBER_BYTES:  # declared: refused before anything is expanded
            raise Refused(
                f"member {name} declares {info.file_size} bytes; at most {MAX_MEMBER_BYTES} (the cap MAX_MEMBER_BYTES)"
            )
        member = _expand(_raw(view, info), info, budget)
        budget -= len(member)
        yield info.filename, member


def check_eval_archive(data: bytes) -> dict[str, bytes]:
    """Refuse an `.eval` archive over the caps (`iter_members`) or with a JSON member that is not UTF-8 or
    fails limits.check_json_text (depth, digits, lone surrogates); returns the members named in KEEP."""
    kept: dict[str, bytes] = {}
    for filename, member in iter_members(data):
        if filename.endswith(".json"):
            try:
                decode_text(member)
                check_json_text(member)
            except Refused as e:
                raise Refused(f"member {shorten(filename)} {e.reason}") from None
        if filename in KEEP:
            kept[filename] = member
    return kept
