"""The manifest as a seal: every file a run directory holds, with its size and SHA-256, and a digest of the manifest
itself, written last and atomically; and the checks that every reader makes against it.

manifest.json keeps how the run was made (`run_files.manifest`) and, under FILES_KEY, every file below its directory
(subfolders included, each seed block's manifest too) except the manifest itself, checkpoints (replaced every
iteration until the run ends; each carries its own digest, see `harness.experiment.checkpoint`), a block's attempt log
(block.json, written after the block's manifest; the merged run's manifest lists it), lock files and the temporary
files of atomic writes. DIGEST_KEY is the SHA-256 of everything else in the manifest, so an edit of the manifest
itself that does not also recompute that digest is found. This is an integrity check (a file cut, changed, added or
removed by accident or by a tool), not a security boundary: whoever can write the directory can re-seal it.

A manifest without either key was written before manifests listed files: nothing can be checked against it (`legacy`).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from harness.common.locks import LOCK_SUFFIX
from harness.common.run_files import BLOCK_FILE, CHECKPOINT_FILE, MANIFEST_FILE, is_temporary, write_json

FILES_KEY = "files"
DIGEST_KEY = "manifest_sha256"
# Folders an interrupted `--force` leaves (`discard_contents`): what it was removing, never listed.
REPLACED_PREFIX = ".replaced-"
_CHUNK = 2**20


class RunDirectoryError(ValueError):
    """A run directory whose files do not verify, or do not read back as the run its grid.json describes: one line
    naming the file and what is wrong (exit code 2 on the command line)."""


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _listed(relative: PurePosixPath) -> bool:
    """Whether the file at `relative` (to the sealed directory) belongs in its manifest."""
    name = relative.name
    if name == CHECKPOINT_FILE or name.endswith(LOCK_SUFFIX) or is_temporary(name):
        return False
    return len(relative.parts) > 1 or name not in (MANIFEST_FILE, BLOCK_FILE)


def directory_files(directory: Path) -> Iterator[str]:
    """The paths (relative, '/'-separated, sorted) of every file below `directory` that its manifest lists."""
    found = []
    for root, folders, files in os.walk(directory):
        folders[:] = sorted(folder for folder in folders if not folder.startswith(REPLACED_PREFIX))
        base = PurePosixPath(Path(root).relative_to(directory).as_posix())
        found += [str(base / name) if str(base) != "." else name for name in files]
    return iter(sorted(path for path in found if _listed(PurePosixPath(path))))


def file_entry(path: Path) -> dict[str, Any]:
    return {"bytes": path.stat().st_size, "sha256": file_sha256(path)}


def _self_digest(manifest: dict[str, Any]) -> str:
    body = {key: value for key, value in manifest.items() if key != DIGEST_KEY}
    return hashlib.sha256(
        json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    ).hexdigest()


def _sealed(manifest: dict[str, Any], files: dict[str, Any]) -> dict[str, Any]:
    # Through JSON first, so the digest is of exactly what a reader parses back (paths as text, tuples as lists).
    payload = json.loads(json.dumps({**manifest, FILES_KEY: files}, default=str))
    payload.pop(DIGEST_KEY, None)
    return {**payload, DIGEST_KEY: _self_digest(payload)}


def write_manifest(directory: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Write `manifest` (how the run was made) into directory/manifest.json with every file below it listed, and its
    own digest. The last write of a run, merge or report; returns what was written."""
    directory = Path(directory)
    files = {relative: file_entry(directory / relative) for relative in directory_files(directory)}
    sealed = _sealed({key: value for key, value in manifest.items() if key != FILES_KEY}, files)
    write_json(directory / MANIFEST_FILE, sealed)
    return sealed


def reseal(directory: Path, manifest: dict[str, Any], rewritten: Callable[[str], bool]) -> None:
    """After a command rewrote some files of a sealed directory (a re-rendered report): list the files `rewritten`
    names as they are now (dropping the ones it removed) and every other file as the manifest already did. The caller
    has verified those others against it (`harness.experiment.verify.check_finished`) before reading any. A manifest
    of before files were listed is left as it is."""
    if legacy(manifest):
        return
    directory = Path(directory)
    kept = {relative: entry for relative, entry in manifest[FILES_KEY].items() if not rewritten(relative)}
    fresh = {
        relative: file_entry(directory / relative) for relative in directory_files(directory) if rewritten(relative)
    }
    write_json(directory / MANIFEST_FILE, _sealed(manifest, dict(sorted({**kept, **fresh}.items()))))


def legacy(manifest: dict[str, Any]) -> bool:
    """Whether a manifest was written before manifests listed files (nothing to check a file against)."""
    return FILES_KEY not in manifest and DIGEST_KEY not in manifest


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """directory/manifest.json, its own digest checked; None where there is none.

    Raises:
        RunDirectoryError: it is not JSON, not a manifest, or its digest does not match its contents.
    """
    path = Path(directory) / MANIFEST_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise RunDirectoryError(f"{path}: cannot be read ({getattr(error, 'strerror', None) or error})") from None
    try:
        manifest = json.loads(text)
    except ValueError as error:
        raise RunDirectoryError(f"{path}: not valid JSON ({error}): cut or edited since it was written") from None
    if not isinstance(manifest, dict):
        raise RunDirectoryError(f"{path}: not a manifest (a JSON object)")
    if legacy(manifest):
        return manifest
    files = manifest.get(FILES_KEY)
    well_formed = isinstance(files, dict) and all(
        isinstance(entry, dict) and isinstance(entry.get("bytes"), int) and isinstance(entry.get("sha256"), str)
        for entry in files.values()
    )
    if manifest.get(DIGEST_KEY) != _self_digest(manifest) or not well_formed:
        raise RunDirectoryError(f"{path}: its own digest does not match its contents: edited since it was written")
    return manifest


def verify_listed(directory: Path, manifest: dict[str, Any], skip: Callable[[str], bool] = lambda _: False) -> None:
    """Check every file `manifest` lists (but those `skip` names) against its size and SHA-256.

    Raises:
        RunDirectoryError: the first file missing, of another size or another digest.
    """
    if legacy(manifest):
        return
    directory = Path(directory)
    where = directory / MANIFEST_FILE
    for relative, entry in manifest[FILES_KEY].items():
        if skip(relative):
            continue
        path = directory / relative
        if not path.is_file():
            raise RunDirectoryError(f"{path}: missing, though {where} lists it")
        size = path.stat().st_size
        if size != entry["bytes"]:
            raise RunDirectoryError(
                f"{path}: {size:,} bytes where {where} lists {entry['bytes']:,}: cut or changed since it was written"
            )
        if file_sha256(path) != entry["sha256"]:
            raise RunDirectoryError(f"{path}: its SHA-256 is not the one {where} lists: changed since it was written")


def run_entries(directory: Path) -> list[Path]:
    """The entries of a directory that belong to a run or a user: all but lock files, temporary files of atomic
    writes and what an interrupted --force left."""
    return sorted(
        entry
        for entry in Path(directory).iterdir()
        if not (entry.name.endswith(LOCK_SUFFIX) or is_temporary(entry.name) or entry.name.startswith(REPLACED_PREFIX))
    )


def discard_contents(directory: Path, entries: list[Path]) -> None:
    """Remove `entries` of `directory` (what its run wrote: `harness.experiment.verify.replaceable_entries`) before
    a new run writes into it (--force): each is renamed into one folder beside them, manifest first, then that folder
    is deleted. A process stopped half-way leaves some entries (and that folder, which nothing reads and the next call
    deletes) but never a manifest vouching for them; no file of the new run is written before this returns."""
    directory = Path(directory)
    for left in directory.glob(f"{REPLACED_PREFIX}*"):
        shutil.rmtree(left, ignore_errors=True)
    if not entries:
        return
    aside = directory / f"{REPLACED_PREFIX}{secrets.token_hex(4)}"
    aside.mkdir()
    for entry in sorted(entries, key=lambda entry: entry.name != MANIFEST_FILE):
        os.rename(entry, aside / entry.name)
    shutil.rmtree(aside)
