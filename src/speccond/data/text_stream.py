"""Your own texts, streamed (``text:DIR?text=COLUMN&label=COLUMN&stream=1``): prepared a chunk of rows at a time,
read a row at a time, so a dataset larger than memory trains.

    folder = prepare(name)                                 # <key>/stream/, written chunk by chunk
    small, tokens = open_cache(folder, name)              # labels, lengths, tokenizer; (N, width) ids memory-mapped
    rows = TokenRows(folder / "train_tokens.npy", indices, small["train_labels"])   # item i: (ids, label, i)

Preparation reads the two chosen splits in chunks (parquet record batches and a saved DatasetDict's slices of
``CHUNK_ROWS`` rows, a CSV file's blocks of ``CSV_BLOCK_BYTES``) in three passes, and holds one chunk, the word
counts and the per-row label ids and lengths (int64 each), never the texts:

1. the columns are checked (present, no empty text) and the label classes found from each split's distinct labels
   (text_files.label_classes: the in-memory path's rules and messages), before anything is written;
2. without ``tokenizer=`` or ``vocab_from=``, the WordPiece is learnt from the training texts' word counts (wordpiece.train_tokenizer
   reads the texts as a stream; its vocabulary depends on the counts alone);
3. each chunk is tokenised and its ids written into int32 (N, width) ``{train,test}_tokens.npy`` files opened with
   ``numpy.lib.format.open_memmap``.

The arrays are the ones the in-memory path stores (text_files.read), row for row, and so is their SHA-256
(checksum.tensors_sha256 reads the .npy files a block of rows at a time), recorded in the folder's small
``arrays.safetensors`` (labels, lengths, the tokenizer). Opening the cache (:func:`verify`) reads the files whole
and checks that SHA-256 the first time, then records each file's (size, mtime_ns) in ``verified.json``; later
openings compare those (one ``stat`` per file) and read the files again only when one differs: a changed or
truncated cache is then removed and refused in one line, an unchanged one (a file only touched) stamped anew.
What a size and an mtime cannot show: a change that keeps a file's size and its mtime, the mtime set back on
purpose (``os.utime``, a copy that keeps times) or by a clock set back; such a cache is trained on. A file written
in the same clock tick as ``verified.json`` is read again (git's "racy" rule: the stamp vouches only for files whose
recorded mtime is older than its own). Delete ``verified.json`` to have the next opening read every file again.

One difference from the in-memory path: a CSV's text columns are read as strings as written, where the
in-memory path lets pyarrow infer their type over the whole file (a column of numbers there reads ``007`` as
``7``); the streamed reader cannot infer over a file it reads a block at a time.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import torch

from speccond.data import text_files
from speccond.data.text_files import LabelKinds, TextSource

log = logging.getLogger(__name__)
FOLDER = "stream"  # under the text cache's key folder, beside the in-memory arrays.safetensors
ARRAYS = "arrays.safetensors"  # the small arrays: labels, lengths, the tokenizer
FILES = (ARRAYS, "train_tokens.npy", "test_tokens.npy")  # the files whose SHA-256 the cache records
STAMPS = "verified.json"  # {"sha256", "files": {file: [size, mtime_ns]}} as they were when the SHA-256 last held
CHUNK_ROWS = 8192  # rows read, checked and tokenised at once (parquet, a saved DatasetDict)
CSV_BLOCK_BYTES = 1 << 24  # bytes of a CSV file read at once (its rows whole: a row must fit in a block)


class Split:
    """One split of the folder: its columns, and its rows a chunk at a time ({column: values} of CHUNK_ROWS rows)."""

    def __init__(self, source: TextSource, name: str, paths: list[Path] = (), saved=None):
        self.source, self.name, self.paths, self.saved = source, name, list(paths), saved
        self.columns = saved.column_names if saved is not None else self._file_columns()

    def _file_columns(self) -> list[str]:
        columns = None
        for path in self.paths:
            csv = path.suffix.lower() == ".csv"
            found = _open(path, (), ()).schema.names if csv else _parquet(path).schema_arrow.names
            if columns is not None and set(found) != set(columns):
                raise ValueError(f"{path} has columns {sorted(found)}, the other {self.name} files {sorted(columns)}")
            columns = columns or found
        return columns

    def chunks(self, columns: list[str]) -> Iterator[dict[str, list]]:
        if self.saved is not None:
            chosen = self.saved.select_columns(columns)
            for start in range(0, len(chosen), CHUNK_ROWS):
                yield chosen[start : start + CHUNK_ROWS]
            return
        for path in self.paths:
            try:
                if path.suffix.lower() == ".csv":
                    batches = _open(path, columns, [c for c in columns if c in _text_columns(self.source)])
                else:
                    batches = _parquet(path).iter_batches(batch_size=CHUNK_ROWS, columns=columns)
                for batch in batches:
                    yield batch.to_pydict()
            except _arrow_errors() as error:
                raise _unreadable(path, error) from None


def _arrow_errors() -> tuple:
    import pyarrow as pa

    return (pa.ArrowException, OSError)


def _unreadable(path: Path, error: Exception) -> ValueError:
    return ValueError(f"{path} cannot be read as {path.suffix[1:]} ({type(error).__name__}: "
                      f"{str(error).splitlines()[0] if str(error) else 'no detail'})")


def _parquet(path: Path):
    import pyarrow.parquet

    try:
        return pyarrow.parquet.ParquetFile(path)
    except _arrow_errors() as error:
        raise _unreadable(path, error) from None


def _open(path: Path, columns, texts) -> object:
    """A CSV file's streaming reader of blocks of CSV_BLOCK_BYTES over ``columns`` (all when empty), the columns
    ``texts`` read as strings."""
    import pyarrow as pa
    import pyarrow.csv

    try:
        return pyarrow.csv.open_csv(path, read_options=pyarrow.csv.ReadOptions(block_size=CSV_BLOCK_BYTES),
                                    convert_options=pyarrow.csv.ConvertOptions(
                                        include_columns=list(columns), column_types={c: pa.string() for c in texts}))
    except _arrow_errors() as error:
        raise _unreadable(path, error) from None


def splits(source: TextSource) -> tuple[dict[str, Split], Optional[list[str]]]:
    """({split: Split}, the label column's class names when it is a ClassLabel), nothing read but the schemas."""
    if not source.saved:
        files = text_files._split_files(source.folder)
        return {split: Split(source, split, paths) for split, paths in files.items()}, None
    saved, names = text_files.saved_splits(source)  # memory-mapped arrow files
    return {name: Split(source, name, saved=split) for name, split in saved.items()}, names


def _text_columns(source: TextSource) -> list[str]:
    return [source.text, source.text_pair] if source.text_pair else [source.text]


def _checked(source: TextSource, found: dict[str, Split], chosen: tuple[str, str], names):
    """Pass 1: ({split: rows}, class names, value -> label id); ValueError for a missing column, an empty text or
    a label the in-memory path refuses (text_files.label_classes)."""
    counts, distinct, kinds = {}, {}, LabelKinds(True, True, frozenset())
    for split in chosen:
        for column in [*_text_columns(source), source.label]:
            if column not in found[split].columns:
                raise ValueError(f"{source.folder}: the {split} split has no column {column!r}; its columns: "
                                 f"{sorted(found[split].columns)}")
        counts[split], distinct[split] = 0, set()
        for chunk in found[split].chunks([*_text_columns(source), source.label]):
            for column in _text_columns(source):
                missing = next((i for i, value in enumerate(chunk[column]) if value is None), None)
                if missing is not None:
                    raise ValueError(f"{source.folder}: row {counts[split] + missing} of the {split} split has no "
                                     f"{column!r} (an empty value); fill or drop such rows")
            labels = chunk[source.label]
            kinds = kinds | LabelKinds.of(labels)
            if kinds.usable:
                distinct[split].update(labels)
            counts[split] += len(labels)
    empty = [split for split in chosen if not counts[split]]
    if empty:
        raise ValueError(f"{source.folder}: the {' and '.join(empty)} split(s) hold no rows")
    classes, index = text_files.label_classes(source, chosen, distinct, kinds, names)
    return counts, classes, index


def prepare(name: str) -> Path:
    """The folder of the streamed cache of ``name`` (``$SPECCOND_DATA/text/<key>/stream``, beside the in-memory
    cache under text_files' key), written chunk by chunk unless it is there."""
    from speccond.data.store import data_dir

    source = text_files.parse(name)
    target = data_dir() / "text" / text_files._key(name, source) / FOLDER
    if (target / ARRAYS).is_file():
        return target
    from safetensors.torch import save_file

    from speccond.checksum import tensors_sha256
    from speccond.data import wordpiece

    found, names = splits(source)
    chosen = text_files._chosen_splits(source, found)
    counts, classes, index = _checked(source, found, chosen, names)
    given = text_files.given_tokenizer(source)  # tokenizer= or vocab_from=
    if given is None:  # pass 2: the word counts of the training texts
        texts = (str(value) for chunk in found["train"].chunks(_text_columns(source))
                 for column in _text_columns(source) for value in chunk[column])
        tokenizer, ids = wordpiece.train_tokenizer(texts, source.vocab, exact=False), None
        small = {"tokenizer": wordpiece.to_bytes(tokenizer)}
    else:
        tokenizer, ids, small = given[0], given[1], dict(given[2])
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        tokens = {}
        for stored, split in zip(("train", "test"), chosen):  # pass 3: tokenised a chunk at a time
            tokens[stored] = np.lib.format.open_memmap(partial / f"{stored}_tokens.npy", mode="w+", dtype=np.int32,
                                                       shape=(counts[split], source.width))
            lengths, labels = np.empty(counts[split], np.int64), np.empty(counts[split], np.int64)
            start = 0
            for chunk in found[split].chunks([*_text_columns(source), source.label]):
                first = [str(value) for value in chunk[source.text]]
                second = [str(value) for value in chunk[source.text_pair]] if source.text_pair else None
                encoded, length = text_files.encode(tokenizer, ids, first, second, source.width)  # int32 (n, width)
                stop = start + len(first)
                tokens[stored][start:stop] = encoded.numpy()
                lengths[start:stop], labels[start:stop] = length.numpy(), [index(v) for v in chunk[source.label]]
                start = stop
            if start != counts[split]:
                raise ValueError(f"{source.folder}: the {split} split held {counts[split]} rows when checked and "
                                 f"{start} when tokenised (its files changed meanwhile); run again once they are written")
            tokens[stored].flush()
            small.update({f"{stored}_lengths": torch.from_numpy(lengths), f"{stored}_labels": torch.from_numpy(labels)})
        digest = tensors_sha256({**small, **{f"{split}_tokens": array for split, array in tokens.items()}})
        del tokens  # the memory maps closed before the folder moves
        save_file(small, str(partial / ARRAYS),
                  metadata={**text_files.record(name, source, digest, classes, tokenizer, chosen), "stream": "1"})
        try:
            os.replace(partial, target)
        except OSError:  # another process (a torchrun rank) prepared it first: the same arrays
            if not (target / ARRAYS).is_file():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def metadata(name: str) -> dict[str, str]:
    """The streamed cache's metadata (text_files.record's, with "stream": "1"), prepared first when needed."""
    return _recorded(prepare(name))


def _recorded(folder: Path) -> dict[str, str]:
    """The metadata of the folder's small arrays file."""
    from safetensors import safe_open

    with safe_open(str(folder / ARRAYS), "pt") as handle:
        return dict(handle.metadata())


def counts(folder: Path) -> tuple[int, int]:
    """(training, test) rows of the streamed cache, from its label arrays' shapes (nothing read)."""
    from safetensors import safe_open

    with safe_open(str(folder / ARRAYS), "pt") as handle:
        return handle.get_slice("train_labels").get_shape()[0], handle.get_slice("test_labels").get_shape()[0]


def open_cache(folder: Path, name: str) -> tuple[dict[str, torch.Tensor], dict[str, np.ndarray]]:
    """(the small arrays, {"train": ids, "test": ids} memory-mapped int32 (N, width)), the folder verified first
    (:func:`verify`); a damaged cache is removed and refused in one line."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    verify(folder, name)
    try:
        return load_file(str(folder / ARRAYS)), _token_maps(folder)
    except (SafetensorError, OSError, ValueError):
        raise _refused(folder, name) from None


def verify(folder: Path, name: str) -> None:
    """Nothing, when the folder's files still have the (size, mtime_ns) ``verified.json`` recorded the last time
    their SHA-256 held (one ``stat`` each); otherwise their SHA-256 checked against the recorded one, reading them
    a block at a time, and the stamps written anew. A changed, truncated or unreadable cache is removed and
    refused in one line (ValueError). The module docstring says what a size and an mtime cannot show."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from speccond.checksum import tensors_sha256

    try:
        recorded = _recorded(folder).get("sha256")
        if recorded is not None and _stamped(folder, recorded):
            return
        before = _stats(folder)
        arrays = {**load_file(str(folder / ARRAYS)),
                  **{f"{split}_tokens": ids for split, ids in _token_maps(folder).items()}}
        intact = recorded is not None and recorded == tensors_sha256(arrays) and _stats(folder) == before
    except (SafetensorError, OSError, ValueError, TypeError):
        intact = False
    if not intact:
        raise _refused(folder, name)
    _stamp(folder, recorded, before)


def _refused(folder: Path, name: str) -> ValueError:
    """The folder removed; the one-line refusal to raise."""
    shutil.rmtree(folder, ignore_errors=True)
    return ValueError(f"the cached arrays of {name!r} in {folder} are damaged and were removed (changed or truncated "
                      "since they were prepared); run again to prepare them anew")


def _token_maps(folder: Path) -> dict[str, np.ndarray]:
    return {split: np.load(folder / f"{split}_tokens.npy", mmap_mode="r") for split in ("train", "test")}


def _stats(folder: Path) -> dict[str, list[int]]:
    """{file: [size, mtime_ns]} of the files whose SHA-256 the cache records."""
    found = {file: (folder / file).stat() for file in FILES}
    return {file: [stat.st_size, stat.st_mtime_ns] for file, stat in found.items()}


def _stamped(folder: Path, recorded: str) -> bool:
    """Whether verified.json vouches for the files as they are: the same SHA-256, each file's size and mtime as
    recorded, and each recorded mtime older than verified.json's own (so a write in the same tick is not missed)."""
    try:
        stamps = json.loads((folder / STAMPS).read_text())
        written = (folder / STAMPS).stat().st_mtime_ns
        return (stamps["sha256"] == recorded and stamps["files"] == _stats(folder)
                and all(mtime < written for _, mtime in stamps["files"].values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _stamp(folder: Path, recorded: str, stats: dict[str, list[int]]) -> None:
    """verified.json written through a partial file and a rename; a folder that cannot be written (a read-only
    cache) is logged, and every opening then reads the files again."""
    partial = folder / f"{STAMPS}.{os.getpid()}.partial"
    try:
        partial.write_text(json.dumps({"sha256": recorded, "files": stats}) + "\n")
        os.replace(partial, folder / STAMPS)
    except OSError as error:
        partial.unlink(missing_ok=True)
        log.warning("could not record that %s was verified (%s); each opening reads its files again", folder, error)


class TokenRows(torch.utils.data.Dataset):
    """Rows ``rows`` of a memory-mapped int32 (N, width) ids file: item i is (int64 (width,) ids of row rows[i],
    its label, i). The file is opened in each process that reads it (a loader's worker receives the path)."""

    def __init__(self, path: Path, rows: torch.Tensor, labels: torch.Tensor):
        self.path, self.rows, self.labels = Path(path), rows.to(torch.int64), labels[rows].to(torch.int64)
        self._ids = None

    def __len__(self) -> int:
        return self.rows.shape[0]

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_ids": None}

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int]:
        if self._ids is None:
            self._ids = np.load(self.path, mmap_mode="r")
        ids = torch.from_numpy(np.array(self._ids[int(self.rows[index])]))  # (width,) int32
        return ids.to(torch.int64), int(self.labels[index]), index
