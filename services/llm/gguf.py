"""Reading a GGUF file's header: what model it holds, before a server is started on it.

A GGUF file starts with the magic ``GGUF``, a version (2 or 3), the tensor and key/value counts, the
key/value metadata (``general.architecture``, ``<arch>.context_length``, ``tokenizer.chat_template``,
…) and one descriptor per tensor (name, shape, type). Only that header is read here, never the
weights, so checking a multi-gigabyte file takes milliseconds: it tells a file that is not a GGUF, a
base model without a chat template and a context window shorter than the configured one apart before
llama.cpp's server would fail on them (or, for a missing template, serve a chat API that answers in a
template the model was never trained on).

The format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md. This reader is small on
purpose (the ``gguf`` package would bring numpy-backed tensor reading Parley does not need).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from services.llm.registry import EmbeddedLLMError

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
# Strings and arrays in the header longer than this are refused: a corrupt length would otherwise
# make the reader allocate gigabytes.
MAX_STRING_BYTES = 64 << 20
MAX_ARRAY_ITEMS = 1 << 26

# GGUF value types (gguf.md, "gguf_metadata_value_type").
_SCALARS: dict[int, tuple[str, int]] = {
    0: ("B", 1),  # uint8
    1: ("b", 1),  # int8
    2: ("H", 2),  # uint16
    3: ("h", 2),  # int16
    4: ("I", 4),  # uint32
    5: ("i", 4),  # int32
    6: ("f", 4),  # float32
    7: ("?", 1),  # bool
    10: ("Q", 8),  # uint64
    11: ("q", 8),  # int64
    12: ("d", 8),  # float64
}
_STRING = 8
_ARRAY = 9

# llama.cpp's ``general.file_type`` (llama_ftype): the quantization most tensors use.
FILE_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
}

# Keys whose (large) array values are skipped, not kept: the vocabulary and merges.
_SKIPPED_ARRAYS = (
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.scores",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
)


class GGUFError(EmbeddedLLMError):
    """A model file Parley cannot serve; the message names the file and what is wrong with it."""


class NotGGUFError(GGUFError):
    """The file is not a GGUF file (wrong magic, unsupported version, truncated or corrupt header)."""


class NotChatModelError(GGUFError):
    """The GGUF holds no chat template: a base model, which answers chat prompts unreliably."""


class ContextTooShortError(GGUFError):
    """The model's trained context is shorter than the context each request is configured to get."""


@dataclass(frozen=True)
class GGUFInfo:
    """What a GGUF header says about its model."""

    path: Path
    version: int
    metadata: dict[str, Any] = field(repr=False)
    tensor_count: int = 0
    parameters: int = 0  # summed over the tensor shapes
    size_bytes: int = 0

    @property
    def architecture(self) -> str | None:
        value = self.metadata.get("general.architecture")
        return str(value) if value is not None else None

    @property
    def name(self) -> str | None:
        value = self.metadata.get("general.name")
        return str(value) if value is not None else None

    @property
    def size_label(self) -> str:
        """``general.size_label`` (e.g. ``1.5B``) when the file has it, else one from the tensor shapes."""
        label = self.metadata.get("general.size_label")
        return str(label) if label else format_parameters(self.parameters)

    @property
    def context_length(self) -> int | None:
        value = self.metadata.get(f"{self.architecture}.context_length")
        return int(value) if isinstance(value, int) else None

    @property
    def chat_template(self) -> str | None:
        value = self.metadata.get("tokenizer.chat_template")
        return str(value) if value else None

    @property
    def quantization(self) -> str | None:
        value = self.metadata.get("general.file_type")
        if not isinstance(value, int):
            return None
        return FILE_TYPES.get(value, f"file_type {value}")

    @property
    def licence(self) -> str | None:
        value = self.metadata.get("general.license")
        return str(value) if value else None

    def summary(self) -> str:
        """One line for logs and ``parley models``."""
        parts = [
            self.name or self.path.name,
            self.architecture or "unknown architecture",
            f"{self.size_label} parameters",
            self.quantization or "unknown quantization",
            f"context {self.context_length}" if self.context_length else "context unknown",
            "chat template" if self.chat_template else "no chat template",
        ]
        return ", ".join(parts)


def format_parameters(n: int) -> str:
    """``1543714304`` → ``1.5B``; ``134515008`` → ``135M``."""
    if n >= 1_000_000_000:
        return f"{n / 1e9:.1f}B"
    if n >= 1_000_000:
        return f"{n / 1e6:.0f}M"
    return str(n)


class _Reader:
    def __init__(self, f: BinaryIO, path: Path, endian: str) -> None:
        self.f = f
        self.path = path
        self.endian = endian

    def read(self, n: int) -> bytes:
        data = self.f.read(n)
        if len(data) != n:
            raise NotGGUFError(f"{self.path}: the GGUF header is truncated (the file ends inside it)")
        return data

    def unpack(self, fmt: str, size: int) -> Any:
        return struct.unpack(self.endian + fmt, self.read(size))[0]

    def string(self) -> str:
        length = self.unpack("Q", 8)
        if length > MAX_STRING_BYTES:
            raise NotGGUFError(f"{self.path}: a header string claims {length} bytes; the file is corrupt")
        return self.read(length).decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        length = self.unpack("Q", 8)
        if length > MAX_STRING_BYTES:
            raise NotGGUFError(f"{self.path}: a header string claims {length} bytes; the file is corrupt")
        self.f.seek(length, 1)

    def value(self, vtype: int, keep: bool = True) -> Any:
        if vtype in _SCALARS:
            fmt, size = _SCALARS[vtype]
            return self.unpack(fmt, size)
        if vtype == _STRING:
            if keep:
                return self.string()
            self.skip_string()
            return None
        if vtype == _ARRAY:
            item_type = self.unpack("I", 4)
            count = self.unpack("Q", 8)
            if count > MAX_ARRAY_ITEMS:
                raise NotGGUFError(f"{self.path}: a header array claims {count} items; the file is corrupt")
            if not keep:
                if item_type in _SCALARS:
                    self.f.seek(_SCALARS[item_type][1] * count, 1)
                else:
                    for _ in range(count):
                        self.value(item_type, keep=False)
                return count
            return [self.value(item_type) for _ in range(count)]
        raise NotGGUFError(f"{self.path}: unknown GGUF value type {vtype}; the file is corrupt")


def read_gguf(path: Path) -> GGUFInfo:
    """The header of the GGUF file at ``path``; ``NotGGUFError`` for anything else.

    Large arrays (the vocabulary) are skipped and recorded as their length."""
    path = Path(path)
    if not path.is_file():
        raise GGUFError(f"{path}: no such file")
    with path.open("rb") as f:
        magic = f.read(4)
        if magic != MAGIC:
            raise NotGGUFError(
                f"{path} is not a GGUF model file (it starts with {magic!r}, not b'GGUF'); llama.cpp "
                "serves GGUF files only: convert the model with llama.cpp's convert_hf_to_gguf.py or "
                "download a .gguf build of it"
            )
        raw_version = f.read(4)
        if len(raw_version) != 4:
            raise NotGGUFError(f"{path}: the GGUF header is truncated (the file ends inside it)")
        endian = "<"
        version = struct.unpack("<I", raw_version)[0]
        if version not in SUPPORTED_VERSIONS and struct.unpack(">I", raw_version)[0] in SUPPORTED_VERSIONS:
            endian = ">"
            version = struct.unpack(">I", raw_version)[0]
        if version not in SUPPORTED_VERSIONS:
            raise NotGGUFError(
                f"{path}: GGUF version {version} is not supported (versions {SUPPORTED_VERSIONS}); "
                "re-convert it with a current llama.cpp"
            )
        r = _Reader(f, path, endian)
        tensor_count = r.unpack("Q", 8)
        kv_count = r.unpack("Q", 8)
        if kv_count > MAX_ARRAY_ITEMS or tensor_count > MAX_ARRAY_ITEMS:
            raise NotGGUFError(f"{path}: the GGUF header's counts are implausible; the file is corrupt")
        metadata: dict[str, Any] = {}
        for _ in range(kv_count):
            key = r.string()
            vtype = r.unpack("I", 4)
            metadata[key] = r.value(vtype, keep=key not in _SKIPPED_ARRAYS)
        parameters = 0
        for _ in range(tensor_count):
            r.skip_string()
            n_dims = r.unpack("I", 4)
            if n_dims > 8:
                raise NotGGUFError(f"{path}: a tensor claims {n_dims} dimensions; the file is corrupt")
            count = 1
            for _ in range(n_dims):
                count *= r.unpack("Q", 8)
            r.read(4 + 8)  # type, offset
            parameters += count
    return GGUFInfo(
        path=path,
        version=version,
        metadata=metadata,
        tensor_count=tensor_count,
        parameters=parameters,
        size_bytes=path.stat().st_size,
    )


def check_servable(info: GGUFInfo, *, n_ctx: int) -> GGUFInfo:
    """Refuse a model Parley's debates cannot use: no chat template (a base model) or a trained
    context shorter than ``n_ctx`` tokens per request (``PARLEY_LLM_EMBEDDED_CTX``)."""
    if not info.chat_template:
        raise NotChatModelError(
            f"{info.path} ({info.summary()}) has no chat template (tokenizer.chat_template): it is a "
            "base model, not an instruction-tuned chat model, and would not follow the debaters' "
            "prompts; use the -Instruct / -Chat build of the model"
        )
    ctx = info.context_length
    if ctx is not None and ctx < n_ctx:
        raise ContextTooShortError(
            f"{info.path} ({info.summary()}) was trained on {ctx} tokens of context, fewer than the "
            f"{n_ctx} each request is given (PARLEY_LLM_EMBEDDED_CTX); set "
            f"PARLEY_LLM_EMBEDDED_CTX={ctx} or less (a MADKE debate needs about 2,000), or use a model "
            "with a longer context"
        )
    return info


def write_gguf(
    path: Path, metadata: dict[str, Any], tensors: dict[str, tuple[int, ...]] | None = None
) -> Path:
    """Write a GGUF header (version 3) with ``metadata`` and tensor descriptors, no weights: the test
    suite's files for what the checks refuse. Values: str, bool, int (as int64), float, lists of str."""

    def enc_string(s: str) -> bytes:
        data = s.encode("utf-8")
        return struct.pack("<Q", len(data)) + data

    def enc_value(v: Any) -> bytes:
        if isinstance(v, bool):
            return struct.pack("<I?", 7, v)
        if isinstance(v, int):
            return (
                struct.pack("<I", 4) + struct.pack("<I", v) if 0 <= v < 2**32 else struct.pack("<Iq", 11, v)
            )
        if isinstance(v, float):
            return struct.pack("<If", 6, v)
        if isinstance(v, str):
            return struct.pack("<I", _STRING) + enc_string(v)
        if isinstance(v, list):
            return struct.pack("<IIQ", _ARRAY, _STRING, len(v)) + b"".join(enc_string(str(x)) for x in v)
        raise TypeError(f"cannot encode {type(v).__name__}")

    shapes = tensors or {}
    out = bytearray(MAGIC + struct.pack("<IQQ", 3, len(shapes), len(metadata)))
    for key, value in metadata.items():
        out += enc_string(key) + enc_value(value)
    offset = 0
    for name, shape in shapes.items():
        out += enc_string(name) + struct.pack("<I", len(shape))
        out += b"".join(struct.pack("<Q", d) for d in shape)
        out += struct.pack("<IQ", 0, offset)
        count = 1
        for d in shape:
            count *= d
        offset += 4 * count
    path.write_bytes(bytes(out))
    return path
