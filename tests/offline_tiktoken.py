"""tiktoken's OpenAI encodings without a download: the vocabulary files the native
extension embeds (shipped in the `bpe-openai` crate, whose source cargo keeps on disk
after a build) are placed in a private ``TIKTOKEN_CACHE_DIR`` under the names tiktoken
looks for, so ``tiktoken.get_encoding`` loads them, checking their hashes, offline. The
folder is made when first needed and removed when the process exits."""

from __future__ import annotations

import atexit
import functools
import gzip
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

ENCODINGS = ("o200k_base", "cl100k_base")
_URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"


def _vocabulary(name: str) -> Path | None:
    cargo = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))
    found = sorted(cargo.glob(f"registry/src/*/bpe-openai-*/data/{name}.tiktoken.gz"))
    return found[-1] if found else None


def tiktoken_encoding(name: str) -> Any:
    """tiktoken's encoding ``name``, loaded from the crate's file (a skip when tiktoken or
    the file is missing)."""
    tiktoken = pytest.importorskip("tiktoken")
    os.environ["TIKTOKEN_CACHE_DIR"] = cache_folder()
    key = hashlib.sha1(_URL.format(name).encode()).hexdigest()
    target = Path(cache_folder()) / key
    if not target.exists():
        source = _vocabulary(name)
        if source is None:
            pytest.skip(f"the bpe-openai crate's {name} vocabulary is not under CARGO_HOME")
        target.write_bytes(gzip.decompress(source.read_bytes()))
    return tiktoken.get_encoding(name)


@functools.cache
def cache_folder() -> str:
    """The private cache (5 MB once both vocabularies are in), removed at exit."""
    folder = tempfile.mkdtemp(prefix="contextfold-tiktoken-")
    atexit.register(shutil.rmtree, folder, True)
    return folder
