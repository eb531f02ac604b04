"""The checkpoint format (``docs/checkpoint.md``) and safe loading.

A checkpoint is a ``torch.save``d dict::

    {"format": "embedscope-checkpoint", "format_version": 1,
     "state_dict": {...tensors...},            # EmbeddingModel.state_dict()
     "config": {"arch", "embed_dim", "normalize", "frozen_bn", "image_size", "dataset", ...},
     "extra": {...}}                           # optional: epoch, metrics, optimiser state for --resume

Everything in it is loadable with ``torch.load(weights_only=True)``. A ``.safetensors`` file holds
tensors only and is read with ``safetensors``. Files of other code bases
(a bare state dict, a pytorch-metric-learning trunk/embedder pair, Roth et al.'s
``checkpoint_*.pth.tar`` with its argparse options and logger objects) are read **without running
any code from the file**: first with ``weights_only=True``; if the file holds other objects, with a
restricted unpickler (:func:`safe_load`) that imports nothing, turns every object of an unknown
class into an inert :class:`Record`, and refuses a file that asks to *call* anything but a short
list of data constructors (a ``__reduce__`` payload such as ``os.system``). ``unsafe_pickle=True``
(``--unsafe-pickle``) is the only way to run code from a file.
"""

from __future__ import annotations

import collections
import importlib
import io
import os
import pickle
import re
import types
import warnings
import zipfile
from pathlib import Path
from typing import Any, Callable

import torch

from embedscope.errors import EmbedscopeError, EmbedscopeWarning, UsageError
from embedscope.fileio import atomic_output, sha256_file
from embedscope.models.backbones import EmbeddingModel, _int_field, build_model, default_config
from embedscope.text import quoted

FORMAT = "embedscope-checkpoint"
FORMAT_VERSION = 1

# ---------------------------------------------------------------------------------------------
# text from files reaches the terminal escaped


def printable(text: Any, limit: int = 160) -> str:
    """``str(text)`` cut to ``limit`` characters, for a message. Not escaped: the line that shows the
    message escapes it (:func:`embedscope.text.safe`), once."""
    s = str(text)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _keys_preview(keys, n: int = 6) -> str:
    keys = [printable(k, 60) for k in keys]
    more = f" (+{len(keys) - n} more)" if len(keys) > n else ""
    return (", ".join(keys[:n]) or "none") + more


# ---------------------------------------------------------------------------------------------
# the restricted unpickler

class Record:
    """An inert stand-in for an object whose class was not imported (nothing of it ever runs).

    ``qualname`` names the original class (``module.Name``); :meth:`get` reads an attribute of
    the original object from its pickled state; ``args`` holds constructor arguments.
    """

    qualname = "?"
    _log: list | None = None

    def __new__(cls, *args: Any, **kwargs: Any) -> "Record":
        obj = object.__new__(cls)
        obj.__dict__["_es_args"] = args
        obj.__dict__["_es_state"] = None
        obj.__dict__["_es_items"] = []
        obj.__dict__["_es_dict"] = {}
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # reached only when the pickle *calls* the global (REDUCE/INST/OBJ), not for NEWOBJ
        if type(self)._log is not None:
            type(self)._log.append(type(self).qualname)

    def __setstate__(self, state: Any) -> None:
        self.__dict__["_es_state"] = state

    def append(self, v: Any) -> None:
        self.__dict__["_es_items"].append(v)

    def extend(self, vs: Any) -> None:
        self.__dict__["_es_items"].extend(vs)

    def __setitem__(self, k: Any, v: Any) -> None:
        self.__dict__["_es_dict"][k] = v

    @property
    def args(self) -> tuple:
        return self.__dict__["_es_args"]

    def state_dict_(self) -> dict:
        """The pickled attribute dict (``{}`` when the state was not a dict)."""
        st = self.__dict__["_es_state"]
        if isinstance(st, tuple) and len(st) == 2 and isinstance(st[0], (dict, type(None))):
            merged = dict(st[0] or {})
            if isinstance(st[1], dict):
                merged.update(st[1])
            return merged
        return dict(st) if isinstance(st, dict) else {}

    def get(self, name: str, default: Any = None) -> Any:
        return self.state_dict_().get(name, default)

    def __repr__(self) -> str:
        return f"<inert {printable(type(self).qualname, 80)}>"


def _codecs_encode(text: Any, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    """``_codecs.encode`` as protocol-2 pickles use it for bytes (text codecs only)."""
    if not isinstance(text, str) or str(encoding).lower().replace("_", "-") not in (
            "latin1", "latin-1", "iso-8859-1", "utf-8", "utf8", "ascii"):
        raise pickle.UnpicklingError("_codecs.encode with a non-text codec")
    return text.encode(encoding, errors)


_TORCH_REBUILD = {
    "_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_parameter",
    "_rebuild_parameter_with_state", "_rebuild_sparse_tensor", "_rebuild_qtensor",
    "_rebuild_meta_tensor_no_storage",
}
_BUILTINS_OK = {"set", "frozenset", "bytearray", "bytes", "complex", "slice", "range", "list", "dict",
                "tuple", "int", "float", "str", "bool"}
#: Globals (inert records) that a pickle may call: constructors of plain data.
_DATA_CALLS = {
    "numpy.core.multiarray.scalar", "numpy._core.multiarray.scalar", "numpy.core.multiarray._reconstruct",
    "numpy._core.multiarray._reconstruct", "numpy.dtype", "numpy.ndarray", "collections.defaultdict",
    "collections.deque", "copyreg._reconstructor", "argparse.Namespace", "builtins.object",
    "datetime.datetime", "datetime.date", "datetime.time", "datetime.timedelta", "decimal.Decimal",
    "fractions.Fraction", "uuid.UUID", "pathlib.Path", "pathlib.PosixPath", "pathlib.WindowsPath",
    "pathlib.PurePosixPath", "pathlib.PureWindowsPath",
}


class _RestrictedUnpickler(pickle.Unpickler):
    """Imports nothing: allowlisted tensor/data globals are real, everything else an inert Record."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.es_calls: list[str] = []
        self.es_records: dict[str, type] = {}

    def find_class(self, module: str, name: str) -> Any:  # noqa: C901 - one flat allowlist
        if not isinstance(module, str) or not isinstance(name, str):
            raise pickle.UnpicklingError("malformed global")
        import _compat_pickle  # Python 2 names of protocol-2 pickles (__builtin__.set, copy_reg, ...)

        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        elif module in _compat_pickle.IMPORT_MAPPING:
            module = _compat_pickle.IMPORT_MAPPING[module]
        if module == "collections" and name in ("OrderedDict", "Counter"):
            import collections

            return getattr(collections, name)
        if module == "builtins" and name in _BUILTINS_OK:
            import builtins

            return getattr(builtins, name)
        if module == "_codecs" and name == "encode":
            return _codecs_encode
        if module == "torch._utils" and name in _TORCH_REBUILD:
            return getattr(importlib.import_module("torch._utils"), name)
        if module == "torch._tensor" and name == "_rebuild_from_type_v2":
            return importlib.import_module("torch._tensor")._rebuild_from_type_v2
        if module == "torch.serialization" and name == "_get_layout":
            return torch.serialization._get_layout
        if module == "torch.nn.parameter" and name == "Parameter":
            return torch.nn.Parameter
        if module == "torch" and name in ("device", "Size", "Tensor"):
            return getattr(torch, name)
        if module == "torch" and name in vars(torch) and isinstance(
                vars(torch)[name], (torch.dtype, torch.layout, torch.memory_format)):
            return vars(torch)[name]
        qual = f"{module}.{name}"
        cls = self.es_records.get(qual)
        if cls is None:
            cls = type(name if name.isidentifier() else "Record", (Record,), {"qualname": qual, "_log": self.es_calls})
            self.es_records[qual] = cls
        return cls


class _CallLog:
    """Collects the calls of every restricted unpickler created during one load."""

    def __init__(self) -> None:
        self.calls: list[str] = []


def _restricted_module(log: _CallLog) -> types.ModuleType:
    class Unpickler(_RestrictedUnpickler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.es_calls = log.calls

    mod = types.ModuleType("embedscope_restricted_pickle")
    mod.Unpickler = Unpickler  # type: ignore[attr-defined]
    mod.load = lambda f, **kw: Unpickler(f, **kw).load()  # type: ignore[attr-defined]
    mod.loads = lambda b, **kw: Unpickler(io.BytesIO(b), **kw).load()  # type: ignore[attr-defined]
    return mod


def safe_load(path: str | os.PathLike) -> Any:
    """Load a PyTorch file without running any of its code: unknown objects become :class:`Record`.

    Raises a one-line :class:`EmbedscopeError` when the pickle asks to call anything but a data
    constructor (tensors, numpy scalars, ...): such a file would run code under ``torch.load``.
    """
    path = Path(path)
    if _sniff(path) == "safetensors":
        return _read_safetensors(path)
    log = _CallLog()
    try:
        obj = torch.load(path, map_location="cpu", weights_only=False, pickle_module=_restricted_module(log))
    except EmbedscopeError:
        raise
    except Exception as e:  # noqa: BLE001 - anything else means the bytes are not a checkpoint we can read
        raise _load_failure(path, e) from None
    bad = [c for c in log.calls if c not in _DATA_CALLS]
    if bad:
        raise EmbedscopeError(
            f"{path}: refusing to load: unpickling it would call {printable(bad[0], 80)}(...), code named by "
            "the file (nothing was run); pass --unsafe-pickle only if you trust its source")
    return obj


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0] if s else e.__class__.__name__


_LEGACY_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"


def _is_safetensors(head: bytes, size: int) -> bool:
    """A safetensors file: an 8-byte little-endian header length, then a JSON object."""
    if len(head) < 9 or head[8:9] != b"{":
        return False
    n = int.from_bytes(head[:8], "little")
    return 2 <= n <= size - 8


def _sniff(path: Path) -> str:
    """"zip" or "legacy" for a file torch.save could have written, "safetensors" for a safetensors
    file (timm / Hugging Face weights); else a one-line error."""
    if not path.exists():
        raise EmbedscopeError(f"{path}: no such checkpoint file")
    if path.is_dir():
        raise EmbedscopeError(f"{path}: is a folder, expected a checkpoint file")
    if not path.is_file():
        raise EmbedscopeError(f"{path}: not a PyTorch checkpoint (not a regular file)")
    try:
        with open(path, "rb") as f:
            head = f.read(len(_LEGACY_MAGIC))
    except OSError as e:
        raise EmbedscopeError(f"{path}: cannot read ({printable(e.strerror or e, 80)})") from None
    if head.startswith(b"PK\x03\x04"):
        try:
            with zipfile.ZipFile(path) as z:
                names = z.namelist()
        except (zipfile.BadZipFile, OSError, ValueError):
            raise EmbedscopeError(f"{path}: not a PyTorch checkpoint (a damaged or truncated zip archive)") from None
        if not any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
            raise EmbedscopeError(f"{path}: not a PyTorch checkpoint (a zip archive without data.pkl)")
        return "zip"
    if head == _LEGACY_MAGIC:
        return "legacy"
    if _is_safetensors(head, path.stat().st_size):
        return "safetensors"
    if not head:
        raise EmbedscopeError(f"{path}: not a PyTorch checkpoint (the file is empty)")
    if head.startswith(b"\x89HDF\r\n\x1a\n"):
        raise EmbedscopeError(f"{path}: not a PyTorch checkpoint but {_hdf5_kind(path)}; this command reads a "
                              "checkpoint (from 'embedscope train' or torch.save)")
    if path.suffix.lower() == ".safetensors":  # (named so, but not one: the message named torch.save's formats alone)
        raise EmbedscopeError(f"{path}: not a safetensors file (no valid safetensors header) nor a PyTorch checkpoint")
    raise EmbedscopeError(f"{path}: not a PyTorch checkpoint (neither torch.save's zip format nor its legacy format)")


def _hdf5_kind(path: Path) -> str:
    """What an HDF5 file given as a checkpoint is, in words: embedscope's embedding or saliency-maps file
    (by its ``format`` attribute or its datasets), else another tool's HDF5 file."""
    try:
        import h5py

        with h5py.File(path, "r") as f:
            fmt = f.attrs.get("format")
            fmt = fmt.decode("utf-8", "replace") if isinstance(fmt, bytes) else fmt
            if fmt == "embedscope-saliency":
                return "a saliency-maps file (from 'embedscope saliency')"
            if "embeddings" in f and "labels" in f:
                return "an embedding file (from 'embedscope embed' or 'import')"
    except Exception:  # noqa: BLE001 - only to name the file's kind
        pass
    return "an HDF5 file"


def _load_failure(path: Path, e: Exception) -> EmbedscopeError:
    """The one line for a checkpoint ``torch.load`` could not read: no memory for it and a read error
    (EIO) are said as such (they were "not a PyTorch checkpoint (MemoryError)"), anything else is bytes
    that are no checkpoint."""
    if isinstance(e, MemoryError):
        return EmbedscopeError(f"{path}: not enough memory to load this checkpoint")
    if isinstance(e, OSError) and e.errno is not None:
        return EmbedscopeError(f"{path}: cannot be read ({e.strerror or e.__class__.__name__})")
    return EmbedscopeError(f"{path}: not a PyTorch checkpoint ({e.__class__.__name__}: {printable(_first_line(e), 100)})")


def read_checkpoint(path: str | os.PathLike, *, unsafe_pickle: bool = False) -> Any:
    """Read a ``torch.save`` file without running its code (see the module docstring).

    A ``.safetensors`` file (timm, Hugging Face) is read with ``safetensors`` (tensors only). Else
    ``torch.load(weights_only=True)`` first; a file with other objects goes through
    :func:`safe_load` (inert records, calls refused) unless ``unsafe_pickle`` allows a full
    ``torch.load``. Random bytes, empty or truncated files: "not a PyTorch checkpoint".
    ``unsafe_pickle`` must be True or False (a string such as ``"no"`` is truthy: it allowed the full
    unpickler, which runs a file's code).
    """
    from embedscope.validation import check_bool

    unsafe_pickle = check_bool(unsafe_pickle, "unsafe_pickle")
    path = Path(path)
    if _sniff(path) == "safetensors":
        return _read_safetensors(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        pass  # needs more than tensors: below
    except Exception as e:  # noqa: BLE001 - any other failure means the bytes are not a checkpoint
        raise _load_failure(path, e) from None
    if not unsafe_pickle:
        return safe_load(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except (ImportError, AttributeError) as e:
        # a class of a code base not installed here (Roth et al.'s utilities.logger, ...): read the file
        # inertly, as without --unsafe-pickle (which made such a file fail that loads without it)
        try:
            return safe_load(path)
        except EmbedscopeError:
            pass
        raise EmbedscopeError(
            f"{path}: --unsafe-pickle: unpickling it needs code that is not importable here "
            f"({e.__class__.__name__}: {printable(_first_line(e), 100)}); install the code base that wrote it"
        ) from None
    except Exception as e:  # noqa: BLE001
        raise EmbedscopeError(
            f"{path}: not a readable PyTorch checkpoint ({e.__class__.__name__}: {printable(_first_line(e), 100)})"
        ) from None


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """A ``.safetensors`` file -> its dict of tensors (a format of tensors only: no code to run)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return dict(load_file(str(path), device="cpu"))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise EmbedscopeError(
            f"{path}: not a readable safetensors file ({e.__class__.__name__}: {printable(_first_line(e), 100)})"
        ) from None


# ---------------------------------------------------------------------------------------------
# state dicts


def module_state_dict(obj: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    """The state dict of a pickled ``nn.Module`` (real, or an inert :class:`Record` of one)."""
    if isinstance(obj, torch.nn.Module):
        return {prefix + k: v for k, v in obj.state_dict().items()}
    if not isinstance(obj, Record):
        return {}
    st = obj.state_dict_()
    out: dict[str, torch.Tensor] = {}
    non_persistent = set(st.get("_non_persistent_buffers_set") or ())
    for group in ("_parameters", "_buffers"):
        for k, v in dict(st.get(group) or {}).items():
            if isinstance(v, torch.Tensor) and not (group == "_buffers" and k in non_persistent):
                out[prefix + str(k)] = v.detach()
    for k, sub in dict(st.get("_modules") or {}).items():
        if sub is not None:
            out.update(module_state_dict(sub, f"{prefix}{k}."))
    return out


def is_module_record(obj: Any) -> bool:
    return isinstance(obj, torch.nn.Module) or (isinstance(obj, Record) and "_modules" in obj.state_dict_())


def _shared(sd: dict[str, Any], prefix: str) -> bool:
    return bool(sd) and all(isinstance(k, str) and k.startswith(prefix) for k in sd)


def strip_prefix(sd: dict[str, Any]) -> dict[str, Any]:
    """Drop the wrappers' prefixes shared by every key: ``module.`` (DataParallel / DDP) and
    ``_orig_mod.`` (``torch.compile``), in any nesting, then a ``model.`` prefix. The state dict of
    PyTorch's ``torch.optim.swa_utils.AveragedModel`` (an SWA or EMA copy: torchvision's reference scripts
    save their ``model_ema`` so) is its model's under ``module.`` beside a counter ``n_averaged``, which
    is dropped (it kept ``module.`` on every key: "missing 100 key(s)", "unexpected 123 key(s)")."""
    return split_prefix(sd)[1]


def split_prefix(sd: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(prefix, strip_prefix(sd))``: the prefix removed from every key (``"module."``,
    ``"module._orig_mod.model."``; ``""`` when none), to name the file's keys as they are in it."""
    rest = {k: v for k, v in sd.items() if k != "n_averaged"}
    if "n_averaged" in sd and _shared(rest, "module."):
        sd = rest
    removed = ""
    while (prefix := next((p for p in ("module.", "_orig_mod.") if _shared(sd, p)), None)) is not None:
        sd = {k[len(prefix):]: v for k, v in sd.items()}
        removed += prefix
    if _shared(sd, "model."):
        sd = {k[len("model."):]: v for k, v in sd.items()}
        removed += "model."
    return removed, sd


_strip_prefix = strip_prefix  # the earlier private name


def is_children_sequential(sd: dict[str, Any]) -> bool:
    """Every key starts with a number: the state dict of ``nn.Sequential(*list(model.children())[:-1])``
    (a feature extractor as retrieval code often builds it), whose layers are numbered, not named."""
    # ASCII digits only: '²'.isdigit() is True, and int('²') then failed with a traceback
    return bool(sd) and all(k.partition(".")[0].isascii() and k.partition(".")[0].isdigit() and k.partition(".")[2]
                            for k in sd)


def renamed_children(sd: dict[str, Any], names) -> dict[str, Any] | None:
    """``sd``'s numbered keys (:func:`is_children_sequential`) with each child's number replaced by its
    name in ``names`` (``0.weight`` -> ``names[0].weight``); None when ``sd`` is not numbered so or
    numbers a child beyond ``names``."""
    if not is_children_sequential(sd):
        return None
    out = {}
    for k, v in sd.items():
        i, _, rest = k.partition(".")
        if int(i) >= len(names):
            return None
        out[f"{names[int(i)]}.{rest}"] = v
    return out


def children_keys(sd: dict[str, Any], module: torch.nn.Module) -> dict[str, Any] | None:
    """The keys of ``nn.Sequential(*list(model.children())[:k])`` renamed to ``module``'s (``0.weight`` ->
    ``conv1.weight``, ``4.0.conv1.weight`` -> ``layer1.0.conv1.weight`` for a ResNet): the i-th child of
    the Sequential is the i-th child of the model (parameter-free children, a ReLU, a pooling, keep their
    numbers). None when ``sd`` is not numbered so, names a child ``module`` does not have, or does not hold
    every tensor of ``module`` once renamed; a tensor of another shape is caught by :func:`load_into`."""
    out = renamed_children(sd, [n for n, _ in module.named_children()])
    if out is None:
        return None
    # only a whole match: else the error names the file's own keys (a part of a model, another model)
    needed = {k for k in module.state_dict() if not k.endswith("num_batches_tracked")}
    return out if needed <= set(out) else None


#: the globals a pickled numpy array is rebuilt by (read inertly, as :class:`Record` s)
_NUMPY_ARRAY = ("numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct", "numpy.ndarray")


def is_numpy_array(v: Any) -> bool:
    """A numpy array (real with --unsafe-pickle, else the inert record of one): not a tensor."""
    return type(v).__module__ == "numpy" and type(v).__name__ == "ndarray" or (
        isinstance(v, Record) and type(v).qualname in _NUMPY_ARRAY)


NUMPY_HINT = ("save them as tensors: torch.save({k: torch.from_numpy(v) for k, v in sd.items()}, FILE)")


def check_state_dict(sd: Any, where: str) -> dict[str, torch.Tensor]:
    """A dict of string keys -> tensors, else a one-line error naming the problem."""
    if not isinstance(sd, dict):
        raise EmbedscopeError(f"{where}: 'state_dict' must be a dict of tensors, got {type(sd).__name__}")
    if not sd:
        raise EmbedscopeError(f"{where}: the state dict is empty")
    for k, v in sd.items():
        if not isinstance(k, str):
            raise EmbedscopeError(f"{where}: state dict key {printable(quoted(k), 60)} is not a string")
        if is_numpy_array(v):
            raise EmbedscopeError(f"{where}: state dict entry '{printable(k, 60)}' is a numpy array, not a tensor; "
                                  + NUMPY_HINT)
        if not isinstance(v, torch.Tensor):
            raise EmbedscopeError(
                f"{where}: state dict entry '{printable(k, 60)}' is a {type(v).__name__}, not a tensor")
    return dict(sd)


#: Where a training checkpoint keeps the exponential-moving-average copy of its weights: timm's
#: ``train.py`` saves ``state_dict_ema``; ``model_ema`` is the other key timm's loader reads with ``use_ema``.
EMA_KEYS = ("state_dict_ema", "model_ema")


def ema_state_dict(obj: Any, path: str | os.PathLike) -> Any:
    """The EMA weights of a training checkpoint (``state_dict_ema``, else ``model_ema``: timm's keys,
    :data:`EMA_KEYS`), for ``--ema``; else a one-line error (the file holds no EMA weights)."""
    if isinstance(obj, dict):
        for key in EMA_KEYS:
            if obj.get(key) is not None:
                found = obj[key]
                return module_state_dict(found) if is_module_record(found) else found
    from embedscope.models.adapters import is_pml_pair, is_roth_checkpoint

    keys = " or ".join(f"'{k}'" for k in EMA_KEYS)
    if is_pml_pair(obj):  # (was the generic line, "its keys: trunk, embedder", not saying what the file holds)
        raise EmbedscopeError(f"{path}: --ema: holds a pytorch-metric-learning trunk and embedder ('trunk', "
                              f"'embedder'), which hold no EMA weights (no {keys} here): load it without --ema")
    if is_roth_checkpoint(obj):  # (was "no EMA weights in the file" only; given as the checkpoint, with its 'opt'
        # dropped, "the checkpoint has no config": not named as Roth et al.'s)
        raise EmbedscopeError(f"{path}: --ema: a Roth et al. checkpoint ('state_dict', 'opt') holds no EMA weights "
                              f"(their code keeps no EMA copy; no {keys} here): load it without --ema")
    what = (f"its keys: {_keys_preview(list(map(str, obj)))}" if isinstance(obj, dict)
            else f"it holds a {printable(getattr(obj, 'qualname', type(obj).__name__), 60)}")
    raise EmbedscopeError(f"{path}: --ema: no EMA weights in the file (no {keys}; {what})")


def _shape(t: torch.Tensor) -> str:
    return "[" + ", ".join(str(int(n)) for n in t.shape) + "]"


class PrecisionWarning(EmbedscopeWarning):
    """Weights saved in a lower precision than the model's (float16, bfloat16) were upcast on load: the
    model runs in float32, its embeddings come from the upcast weights."""


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def upcast_dtypes(sd: dict[str, torch.Tensor], own: dict[str, torch.Tensor]) -> dict[str, int]:
    """The floating dtypes of ``sd`` of lower precision than the tensors of ``own`` they load into
    (``{"float16": 62}``: how many tensors of each): what ``load_state_dict`` upcasts without a word."""
    found: dict[str, int] = {}
    for k, v in sd.items():
        t = own.get(k)
        if (isinstance(v, torch.Tensor) and isinstance(t, torch.Tensor) and v.is_floating_point()
                and t.is_floating_point() and v.dtype != t.dtype and v.element_size() < t.element_size()):
            found[_dtype_name(v.dtype)] = found.get(_dtype_name(v.dtype), 0) + 1
    return found


def say_upcast(upcast: dict[str, int], where: Any, *sds: dict[str, torch.Tensor]) -> str:
    """One :class:`PrecisionWarning` for the lower-precision tensors of a load (``upcast``: what
    :func:`load_into` returned, summed over the files of one model; ``sds``: the state dicts loaded);
    returns what to append to the ``checkpoint_format`` (``" (float16 weights, upcast to float32)"``),
    "" when nothing was upcast."""
    if not upcast:
        return ""
    total = sum(1 for sd in sds for v in sd.values() if isinstance(v, torch.Tensor) and v.is_floating_point())
    names = " and ".join(sorted(upcast))
    n = sum(upcast.values())
    which = "its weights are" if n >= total else f"{n} of its {total} weight tensors are"
    warnings.warn(PrecisionWarning(
        f"{printable(where, 1000)}: {which} {names}: upcast to float32 on load (the model runs in float32; the "
        "embeddings come from the upcast weights)"), stacklevel=3)
    return f" ({names.replace(' and ', '/')} weights, upcast to float32)"


def _extra_prefixes(unexpected: list[str], own: dict[str, Any]) -> list[str]:
    """For each unexpected key, its shortest module prefix under which the model has no key (``proj.`` of
    ``proj.weight``; ``head.2.`` of ``head.2.weight`` beside the model's ``head.0.*``), in order, once each."""
    out: dict[str, None] = {}
    for k in unexpected:
        parts = k.split(".")
        for i in range(1, len(parts)):
            p = ".".join(parts[:i]) + "."
            if not any(o.startswith(p) for o in own):
                out[p] = None
                break
    return list(out)


def load_into(model: torch.nn.Module, sd: dict[str, torch.Tensor], where: str, what: str,
              hint: str = "", key_prefix: str | None = "", container: tuple[str, ...] | None = None,
              file_key: Callable[[str], str] | None = None) -> dict[str, int]:
    """``load_state_dict`` with one-line errors; BatchNorm's ``num_batches_tracked`` may be absent.

    Every problem is named in the one line: missing keys, unexpected keys (the first three) and tensors
    of another shape (``file [8, 128], model [8, 512]``; torch's own message was cut before the model's
    shape, and a shape mismatch hid the missing and unexpected keys). Keys the model does not have, when
    nothing else is wrong (a custom head, a loss's weights): the line says how to save the file without
    them. ``hint``: what to do next, appended. ``key_prefix``: what the file's keys have in front of
    ``sd``'s (``module.`` removed by :func:`strip_prefix`, ``net.`` by :func:`read_submodule`): that advice
    names the keys as they are in the file (it named ``'proj.'`` for a file of ``module.proj.*`` keys,
    which left them in; the unexpected keys are named so too); None when ``sd``'s keys were renamed (numbered
    layers named): no such advice. ``container``: the keys under which the file keeps ``sd`` (``("state_dict",)``
    of an embedscope checkpoint): the advice then saves the whole file, its config kept (:func:`resave_hint`).
    ``file_key``: for ``sd``'s keys renamed from the file's (Roth et al.'s ``model.*`` read as ``backbone.*``, an
    old DenseNet's ``norm.1`` as ``norm1``), the file's name of a key or a key prefix of ``sd``: the unexpected keys
    and the layers of a larger network are named so (``key_prefix`` is then not used to name them).

    Returns the lower-precision dtypes that were upcast (:func:`upcast_dtypes`), for :func:`say_upcast`.
    """
    own = model.state_dict()
    missing = [k for k in own if k not in sd and not k.endswith("num_batches_tracked")]
    unexpected = [k for k in sd if k not in own]
    shapes = [k for k in sd if k in own and tuple(sd[k].shape) != tuple(own[k].shape)]
    parts = []
    if missing:
        parts.append(f"missing {len(missing)} key(s) e.g. {printable(missing[0], 60)}")
    if unexpected:
        # the file's own keys (the prefix removed in front: the advice below names them so)
        named = ([file_key(k) for k in unexpected] if file_key is not None
                 else unexpected if key_prefix is None else [key_prefix + k for k in unexpected])
        parts.append(f"unexpected {len(unexpected)} key(s) e.g. {_keys_preview(named, 3)}")
    if shapes:
        k = shapes[0]
        more = f" (+{len(shapes) - 1} more)" if len(shapes) > 1 else ""
        parts.append(f"size mismatch for {printable(k, 60)}: file {_shape(sd[k])}, model {_shape(own[k])}{more}")
    if parts:
        extra = ""
        buffers = {n for n, _ in model.named_buffers()}
        if missing and not unexpected and not shapes and set(missing) <= buffers:
            # (an EMA of the parameters only: BatchNorm's running statistics are not in it, and the model's own
            # initial ones would have been mixed with the file's parameters)
            extra = ("; the file holds every parameter but not these buffers (BatchNorm's running statistics: an "
                     "EMA of the parameters only?): the model cannot be run without them")
        elif unexpected and not missing and not shapes:
            # every tensor of the model is there: the others are layers it does not have (a custom head,
            # a loss's weights), which a strict load refuses; say how to leave them out (was only the first key)
            pre = _extra_prefixes(unexpected, own)
            nested = [p for p in pre if p.count(".") > 1]
            if nested:  # inside the model's own modules (layer1.2.* of a ResNet-34 given as a ResNet-18): not
                # a head to drop but another, larger network (dropping them gave a wrong network, as advised)
                shown = file_key(nested[0]) if file_key is not None else (key_prefix or "") + nested[0]
                extra = (f"; these layers sit inside the model's own modules (e.g. '{printable(shown, 60)}*'): "
                         f"the file holds a larger network than {what}? name its architecture with --arch")
            elif pre and key_prefix is not None:
                drop = [file_key(p) if file_key is not None else key_prefix + p for p in pre]
                long = _too_long(drop[:4])
                what_saved = "the file without them, the rest of it kept" if container else "the state dict without them"
                if long is not None:  # (no command: one naming it shortened would match no key)
                    how = f" (the keys under {long}" + (" and others)" if len(drop) > 1 else ")")
                else:
                    shown = ", ".join(py_str(p) for p in drop[:4]) + ("," if len(drop) == 1 else "")
                    how = ", e.g. " + resave_hint(
                        lambda sd: f"{{k: v for k, v in {sd}.items() if not k.startswith(({shown}))}}", container)
                extra = (f"; the model has no such layers: to load the rest, save {what_saved}{how}"
                         + (f" ({len(pre) - 4} more prefixes)" if len(pre) > 4 else ""))
        raise EmbedscopeError(f"{where}: weights do not fit {what} ({'; '.join(parts)}){extra}{hint}")
    upcast = upcast_dtypes(sd, own)
    # the checks above found the model's own key names: the file is read as its current version. A module's
    # version travels in a state dict's ``_metadata``, which every dict made of the file's (a prefix removed,
    # keys renamed) lost: torchvision's MNASNet refused a version of None with a ValueError (a traceback)
    sd = collections.OrderedDict(sd)
    sd._metadata = getattr(own, "_metadata", None)  # type: ignore[attr-defined]
    try:
        model.load_state_dict(sd, strict=False)
    except (RuntimeError, ValueError) as e:  # anything the checks above did not foresee
        first = str(e).strip().splitlines()[-1].strip()
        raise EmbedscopeError(f"{where}: weights do not fit {what} ({printable(first, 160)}){hint}") from None
    return upcast


# ---------------------------------------------------------------------------------------------
# the embedscope format


def save_checkpoint(path: str | os.PathLike, model: EmbeddingModel, config: dict[str, Any], *,
                    extra: dict[str, Any] | None = None, force: bool = False) -> Path:
    """Atomically write a checkpoint (temporary file in the same folder, then rename)."""
    obj = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "config": dict(config),
        "extra": dict(extra or {}),
    }
    with atomic_output(path, force=force) as tmp, open(tmp, "wb") as fh:
        # through a file object: torch names the zip's inner folder after a path's stem (here the
        # random temporary name), so the same checkpoint saved twice had other bytes and sha256
        torch.save(obj, fh)
    return Path(path)


#: the keys under which training scripts commonly save their model's weights beside the optimizer's
TRAINING_STATE_KEYS = ("model_state_dict", "model")


def training_state_key(obj: Any) -> str | None:
    """The key of :data:`TRAINING_STATE_KEYS` under which a training script's checkpoint without a
    ``state_dict`` keeps its model's weights (``{'model_state_dict': ..., 'optimizer_state_dict': ...}``,
    torchvision's reference scripts' ``{'model': ..., 'optimizer': ..., 'args': ...}``): the one such key
    holding a non-empty dict of tensors; None for any other layout."""
    wrapped = training_state_keys(obj)
    return wrapped[0] if len(wrapped) == 1 else None


def training_state_keys(obj: Any) -> list[str]:
    """Every key of :data:`TRAINING_STATE_KEYS` holding a non-empty dict of tensors in a checkpoint
    without a ``state_dict``."""
    if not isinstance(obj, dict) or obj.get("state_dict") is not None:  # (a 'state_dict' of None: unused)
        return []
    return [k for k in TRAINING_STATE_KEYS if isinstance(obj.get(k), dict) and obj[k]
            and all(isinstance(v, torch.Tensor) for v in obj[k].values())]


def check_one_training_state(obj: Any, path: Any) -> None:
    """A one-line error for a checkpoint holding weights under both ``model_state_dict`` and ``model``:
    which one to read is not guessed (was "no tensors found" / "unknown checkpoint layout")."""
    both = training_state_keys(obj)
    if len(both) > 1:
        raise EmbedscopeError(
            f"{path}: holds weights under both {' and '.join(repr(k) for k in both)}: which one to read is not "
            f"guessed; save the one to embed alone (torch.save(ckpt['{both[0]}'], FILE))")

_LAYOUTS = ("an embedscope checkpoint ('format', 'state_dict', 'config'), a bare state dict "
            "('backbone.*', 'head.*' with --arch; also under 'model_state_dict' or 'model'), Roth et al.'s "
            "('state_dict', 'opt') or a "
            "pytorch-metric-learning trunk/embedder pair (--trunk/--embedder, or one file of 'trunk' and 'embedder')")


def load_checkpoint(path: str | os.PathLike, *, arch: str | None = None, embed_dim: int | None = None,
                    unsafe_pickle: bool = False, ema: bool = False, transform_input: bool | None = None
                    ) -> tuple[EmbeddingModel, dict[str, Any], dict[str, Any]]:
    """Load a checkpoint -> (model in eval mode, config, info with ``sha256``, ``extra``, ``format``).

    Reads the embedscope format, a bare state dict (with ``arch``), Roth et al.'s
    ``checkpoint_*.pth.tar`` and a folder holding a pytorch-metric-learning
    ``trunk_best*.pth`` / ``embedder_best*.pth`` pair (:mod:`embedscope.models.adapters`). A whole
    pickled ``EmbeddingModel`` (``torch.save(model)``) needs ``unsafe_pickle``; other pickled
    modules are refused (:func:`_load_pickled_module`).

    ``ema``: the file's EMA weights (``state_dict_ema``, :func:`ema_state_dict`) instead of its
    ``state_dict``; a file without them is a one-line error. ``transform_input`` (a
    pytorch-metric-learning folder only): see :func:`~embedscope.models.adapters.load_pml`.
    """
    from embedscope.models import adapters

    path = Path(path)
    if path.is_dir():
        if ema:
            raise UsageError(f"{path}: --ema: pytorch-metric-learning's trunk and embedder files hold no EMA weights")
        return adapters.load_pml_folder(path, arch=arch, unsafe_pickle=unsafe_pickle, transform_input=transform_input)
    obj = read_checkpoint(path, unsafe_pickle=unsafe_pickle)
    if adapters.is_pml_pair(obj) and not ema:  # {'trunk': ..., 'embedder': ...}: a pair in one file
        return adapters.load_pml_pair(obj, path, arch=arch, transform_input=transform_input)
    if transform_input is not None:
        raise UsageError("--no-transform-input applies to a pytorch-metric-learning trunk (--trunk, a saved_models "
                         "folder, a file of 'trunk' and 'embedder') and to --weights; a checkpoint file records its "
                         "own input handling")
    ema_key = None
    roth = adapters.is_roth_checkpoint(obj)
    # where an embedscope checkpoint keeps the state dict read: the advice that saves it changed keeps the rest
    # of the file (its config: saved as a bare state dict, as advised, it needed --arch)
    container = None
    if isinstance(obj, dict) and obj.get("format") == FORMAT:
        key = next((k for k in EMA_KEYS if obj.get(k) is not None), None) if ema else "state_dict"
        container = (key,) if key is not None and isinstance(obj.get(key), dict) else None
    if ema:
        ema_sd = ema_state_dict(obj, path)  # (a Roth et al. file without one: said to be theirs)
        ema_key = next(k for k in EMA_KEYS if obj.get(k) is not None)
        keep = [k for k in obj if k not in EMA_KEYS] if roth else ["format", "format_version", "config", "extra"]
        obj = {**{k: obj[k] for k in keep if k in obj}, "state_dict": ema_sd}
    if roth:  # (its 'opt' kept with --ema: the EMA copy is read with its options)
        model, config, info = adapters.load_roth(obj, path, arch=arch, embed_dim=embed_dim)
        if ema_key is not None:
            config["weights_ema"] = True
            info["format"] += f" ('{ema_key}')"
        return model, config, info
    fmt = "embedscope"
    if is_module_record(obj):  # a whole pickled module (torch.save(model))
        return _load_pickled_module(obj, path, arch=arch, embed_dim=embed_dim, unsafe_pickle=unsafe_pickle)
    if isinstance(obj, Record):
        raise EmbedscopeError(f"{path}: holds a {printable(obj.qualname, 80)} object, not a checkpoint; "
                              f"expected {_LAYOUTS}")
    if not isinstance(obj, dict):
        raise EmbedscopeError(f"{path}: expected a dict with 'state_dict' and 'config', got {type(obj).__name__}")
    check_one_training_state(obj, path)
    wrapped = training_state_key(obj)
    if wrapped is not None:
        # a training script's own checkpoint: {'model_state_dict': ..., 'optimizer_state_dict': ..., 'epoch': ...}
        # or {'model': ...}: its weights as a bare state dict (--arch names the model)
        sd, config, extra, fmt = (check_state_dict(obj[wrapped], str(path)), {}, {},
                                  f"training checkpoint ('{wrapped}')")
    elif "state_dict" in obj:
        sd = check_state_dict(obj["state_dict"], str(path))
        config = obj.get("config") or {}
        if not isinstance(config, dict):
            raise EmbedscopeError(f"{path}: 'config' must be a dict, got {type(config).__name__}")
        if any(not isinstance(k, str) for k in config):
            raise EmbedscopeError(f"{path}: 'config' keys must be strings")
        config = dict(config)
        extra = obj.get("extra") or {}
        extra = dict(extra) if isinstance(extra, dict) else {"extra": extra}
        if obj.get("format") not in (None, FORMAT):
            raise EmbedscopeError(
                f"{path}: unknown format {printable(quoted(obj.get('format')), 60)} (expected '{FORMAT}')")
        if obj.get("format") is None and "config" not in obj:  # another tool's {'state_dict', 'optimizer', ...}
            fmt = "training checkpoint ('state_dict')"
        version = obj.get("format_version", FORMAT_VERSION)
        if isinstance(version, bool) or not isinstance(version, int):
            raise EmbedscopeError(f"{path}: 'format_version' must be an integer, got {printable(quoted(version), 40)}")
        if version > FORMAT_VERSION:
            raise EmbedscopeError(
                f"{path}: format_version {version} is newer than this embedscope reads ({FORMAT_VERSION})")
    elif obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        sd, config, extra, fmt = check_state_dict(obj, str(path)), {}, {}, "bare state dict"
    else:
        raise EmbedscopeError(f"{path}: unknown checkpoint layout: expected {_LAYOUTS}; found keys "
                              f"{_keys_preview(list(map(str, obj)))}")
    if ema_key is not None:  # the EMA copy read, not the 'state_dict' (was "training checkpoint ('state_dict')")
        fmt = (f"training checkpoint ('{ema_key}')" if fmt.startswith("training checkpoint")
               else f"{fmt} ('{ema_key}')")
    removed, sd = split_prefix(sd)
    sub = None
    # an embedscope model's keys: its backbone's under 'backbone.*' (a model of head 'none' has no 'head.*'). A file
    # of 'head.*' keys without them is another network's (torchvision's Swin and timm's ViT name their classifier
    # 'head'): it was read as an embedscope model that "has no config", then, --arch given, missed every backbone key
    if not any(k.startswith("backbone.") for k in sd):
        # a training module's model under one attribute beside other weights ({'model.backbone.*', 'model.head.*',
        # 'loss.W'}: a Lightning module's): read from that prefix, as --weights and --trunk read a backbone (was
        # "unknown key layout", with advice to use --weights, which leaves the head out)
        subs = [p for p in key_prefixes(sd) if any(k.startswith(p + "backbone.") for k in sd)
                and any(k.startswith(p + "head.") for k in sd)]
        if len(subs) > 1:
            names = ", ".join(f"'{printable(removed + p, 60)}*'" for p in subs[:4])
            raise EmbedscopeError(
                f"{path}: the keys under {len(subs)} prefixes each hold an embedscope model ({names}): which one to "
                f"read is not guessed; save the one to embed alone, e.g. {save_one_hint(removed + subs[0], container)}")
        if subs:
            sub = subs[0]
            sd = read_submodule(sd, sub, path, "model")
    if not any(k.startswith("backbone.") for k in sd):  # before asking for --arch: it would not help
        raise EmbedscopeError(
            f"{path}: unknown key layout for an embedscope model: expected 'backbone.*' and 'head.*' keys, found "
            f"{_keys_preview(list(sd))}; {_foreign_state_dict_hint(sd, path, obj)}")
    file_arch = config.get("arch")
    if arch:
        config["arch"] = arch
    if "arch" not in config:
        if fmt == "bare state dict" or (fmt.startswith("training checkpoint") and "state_dict" not in obj):
            raise EmbedscopeError(f"{path}: a {fmt} has no config: name the architecture with --arch")
        if not obj.get("config"):
            raise EmbedscopeError(f"{path}: the checkpoint has no config: name the architecture with --arch")
        raise EmbedscopeError(f"{path}: its config names no architecture ('arch' is missing): name it with --arch")
    if config.get("head", "linear") in ("linear", "random"):  # the size the file's head has
        head_out = sd.get("head.weight", sd.get("head.bias"))
        if head_out is not None and head_out.ndim >= 1:
            config.setdefault("embed_dim", int(head_out.shape[0]))
    if embed_dim:
        config["embed_dim"] = embed_dim
    arch_name = config.pop("arch")
    if not isinstance(arch_name, str):
        raise EmbedscopeError(f"{path}: config 'arch' must be a string, got {printable(quoted(arch_name), 40)}")
    if fmt == "bare state dict" or fmt.startswith("training checkpoint"):
        # another tool's weights: trained with a loss the file does not name (no config said 'untrained':
        # saliency's family 'other', "names no loss", not 'untrained' with the random networks)
        config.setdefault("source_format", fmt)
    config = default_config(arch_name, **config)
    try:
        for k in ("image_size", "resize"):  # checked as embed_dim is (a 0 or a -5 failed deep in torchvision)
            if config.get(k) is not None:
                config[k] = _int_field(config, k, None)
        model = build_model(config)
    except EmbedscopeError as e:  # the file it came from, in front
        raise EmbedscopeError(f"{path}: {e}") from None
    hint = ""
    if arch and isinstance(file_arch, str) and file_arch != arch:
        hint = f"; the file's config names {printable(file_arch, 40)}, which --arch {printable(arch, 40)} replaced"
    upcast = load_into(model, sd, str(path), f"a {printable(config['arch'], 40)} model", hint=hint,
                       key_prefix=removed + (sub or ""), container=container)
    if sub is not None:
        fmt += f" (its '{printable(sub, 60)}*' keys)"
    fmt += say_upcast(upcast, path, sd)
    model.eval()
    if ema:
        config["weights_ema"] = True  # the file's EMA weights, not its state_dict
    return model, config, {"sha256": sha256_file(path), "extra": extra, "path": str(path), "format": fmt}


#: the first names of keys that timm's models have and torchvision's do not (ViT's ``patch_embed``, ``cls_token``,
#: ``pos_embed``; ConvNeXt's, RegNet's and NFNet's ``stages``; EfficientNet's and MobileNet's ``conv_stem``)
_TIMM_TOPS = ("patch_embed", "cls_token", "pos_embed", "stages", "conv_stem")


def timm_key(sd: dict[str, Any]) -> str | None:
    """A key of ``sd`` named as timm names its models' layers and no torchvision model does (:data:`_TIMM_TOPS`);
    None when none is."""
    return next((k for k in sd if isinstance(k, str) and k.split(".")[0] in _TIMM_TOPS), None)


#: the words after a suggested ``--head none`` naming the other choice (not in the command: see
#: :func:`_foreign_state_dict_hint`)
HEAD_RANDOM = "or --head random for a seeded random linear head on the features"


def _foreign_state_dict_hint(sd: dict[str, torch.Tensor], path: Path, obj: Any = None) -> str:
    """What to do with a state dict that is not an embedscope model's (the end of a one-line error). Each
    command it names runs as shown (``--head none``; ``--head random`` said in words after it: the choice
    written ``none|random`` in the command piped it into a program named ``random``)."""
    from embedscope.models.adapters import detect_arch

    a = detect_arch(sd)
    if a:
        own = trained_last_layers(sd, ["fc.", "last_linear."])
        if own:  # (--weights would drop it: the user's embedding layer, most likely)
            name, n_in, n_out = own[0]
            return (f"its keys are those of a {a} backbone whose {printable(name, 40)} layer ({n_in} -> {n_out}) is "
                    f"not an ImageNet classifier's size: {keep_layer_hint(path, note=False)}; --arch {a} --weights "
                    f"{sh_arg(path)} --head none embeds the {n_in}-d features before it ({HEAD_RANDOM})"
                    f"{bash_note(path)}")
        return (f"its keys are those of a {a} backbone (a torchvision / pytorch-metric-learning trunk file): embed "
                f"it with no checkpoint as --arch {a} --weights {sh_arg(path)} --head none ({HEAD_RANDOM}), or as "
                f"--trunk with --embedder{bash_note(path)}")
    if isinstance(obj, dict) and isinstance(obj.get("arch"), str) and "args" in obj:  # timm's train.py
        # (the file's name, whole in the command: a name of hundreds of characters is no timm model's)
        arch = "timm:" + obj["arch"] if len(obj["arch"]) <= 200 else None
        named = sh_arg(arch) if arch is not None else "timm:NAME"
        return (f"it looks like a timm training checkpoint of {printable(obj['arch'], 60)}: embed it with no "
                f"checkpoint as --arch {named} --weights {sh_arg(path)} --head none ({HEAD_RANDOM})"
                f"{bash_note(arch, path)}")
    timm = timm_key(sd)
    if timm is not None:
        return (f"its key names are timm's (e.g. {printable(timm, 60)}), not torchvision's: embed it with no checkpoint "
                f"as --arch timm:NAME --weights {sh_arg(path)} --head none ({HEAD_RANDOM}; needs the timm package)"
                f"{bash_note(path)}")
    if is_children_sequential(sd):
        from embedscope.models.adapters import detect_numbered_arch

        a = detect_numbered_arch(sd)
        model = f"a {a}'s" if a else "a model's"
        return (f"its layers are numbered (0.weight, ...: an nn.Sequential of {model} children, e.g. "
                "nn.Sequential(*list(resnet.children())[:-1])): embed it with no checkpoint as --arch "
                f"{a or 'NAME'} --weights {sh_arg(path)} --head none ({HEAD_RANDOM}), or as --trunk with --embedder"
                f"{bash_note(path)}")
    return ("for backbone weights alone use --weights with --arch and --head none (or --head random), for a "
            "pytorch-metric-learning trunk use --trunk with --embedder")


#: the output sizes of the classifiers of released ImageNet weights: ImageNet-1k (1001 with TensorFlow's
#: background class), ImageNet-21k-P (11221, 11821) and ImageNet-22k (21841, 21843). A layer that
#: ``--weights`` drops with another output size may be a user's own layer (an embedding layer put in
#: place of ``fc``): :func:`load_backbone_weights` warns, naming it.
IMAGENET_CLASSES = (1000, 1001, 11221, 11821, 21841, 21843)


class DroppedLayerWarning(EmbedscopeWarning):
    """``--weights`` dropped a last linear layer that is not an ImageNet classifier (another output size):
    perhaps the user's own embedding layer; the backbone's features are embedded without it."""


def trained_last_layers(sd: dict[str, torch.Tensor], prefixes) -> list[tuple[str, int, int]]:
    """``(name, in, out)`` of each linear layer of ``sd`` under ``prefixes`` (the classifier names that
    ``--weights`` drops: ``fc.``, ``last_linear.``, ``head.fc.``, ...) whose output size is no ImageNet
    classifier's (:data:`IMAGENET_CLASSES`): a layer a user put in place of the classifier (``model.fc =
    nn.Linear(512, 128)``, an embedding layer) or a classifier of their own classes."""
    out = []
    for pre in dict.fromkeys(prefixes):
        w = sd.get(pre + "weight")
        if isinstance(w, torch.Tensor) and w.ndim == 2 and int(w.shape[0]) not in IMAGENET_CLASSES:
            out.append((pre[:-1], int(w.shape[1]), int(w.shape[0])))
    return out


def keep_layer_hint(path, arch: str | None = None, note: bool = True) -> str:
    """How to embed a backbone file with its last linear layer kept: as a pytorch-metric-learning trunk
    (whose linear layer stays in the model) with an empty embedder (the identity); ``arch`` when the
    trunk's keys may not say it (a timm model). ``note``: with :func:`bash_note` at its end (a
    message that adds it after a later command of its own: False)."""
    named = f" --arch {sh_arg(arch)}" if arch else ""
    return (f"to embed with that layer, give the file as --trunk {sh_arg(path)}{named} with an empty "
            "--embedder (torch.save({}, 'identity.pth'))" + (bash_note(path, arch) if note else ""))


#: torchvision's released DenseNet files keep the pre-0.4 module names ``denselayerN.norm.1``,
#: ``.conv.2``, ... that torchvision renames to ``norm1``, ``conv2`` when it loads them.
_DENSE_OLD = re.compile(r"(denselayer\d+\.(?:norm|relu|conv))\.([12])\.")
#: those names as torchvision has them now (``norm1``), to name a file's key in its old form again
_DENSE_NEW = re.compile(r"(denselayer\d+\.(?:norm|relu|conv))([12])\.")
#: ViT files saved by torchvision before 0.13 name the two linear layers
#: of each encoder block's MLP ``mlp.linear_1`` / ``mlp.linear_2``; torchvision renames them ``mlp.0`` / ``mlp.3``
#: when it loads such a file (a module version below 2)
_VIT_OLD = re.compile(r"(encoder_layer_\d+\.mlp\.)linear_([12])\.")


def torchvision_name(key: str) -> str:
    """A key of a torchvision file as torchvision names it now, as its own loader renames it (:data:`_DENSE_OLD`,
    :data:`_VIT_OLD`); other keys as they are."""
    key = _DENSE_OLD.sub(r"\1\2.", key)
    return _VIT_OLD.sub(lambda m: f"{m.group(1)}{0 if m.group(2) == '1' else 3}.", key)


def torchvision_file_key(renamed: dict[str, str], key_prefix: str | None) -> Callable[[str], str] | None:
    """:func:`load_into`'s ``file_key`` for a state dict read by :func:`torchvision_name` (``renamed``: each key as
    read -> the file's): an old DenseNet's (``norm.1``) or ViT's keys (``mlp.linear_1``) read as torchvision's
    (``norm1``, ``mlp.0``) are named in the errors as the file has them (the key itself, or a DenseNet prefix
    spelled back), ``key_prefix`` in front; None when no key was renamed, or ``key_prefix`` is None (the keys
    were renamed otherwise: numbered layers named)."""
    if key_prefix is None or all(k == v for k, v in renamed.items()):
        return None

    def file_key(k: str) -> str:
        return key_prefix + renamed.get(k, _DENSE_NEW.sub(r"\1.\2.", k))
    return file_key


def classifier_names(backbone: torch.nn.Module) -> tuple[str, ...]:
    """The module name(s) of the classifier that :func:`make_backbone` replaced by the identity."""
    names = getattr(backbone, "embedscope_classifier", None) or ()
    return (names,) if isinstance(names, str) else tuple(names)


PICKLED_FORMAT = "pickled embedscope model (--unsafe-pickle)"


#: the wrappers a model is trained in, its network as their ``module`` (``torch.save(model)`` of a model trained
#: on several GPUs pickles the wrapper)
_PARALLEL = ("torch.nn.parallel.data_parallel.DataParallel", "torch.nn.parallel.distributed.DistributedDataParallel")


def _unwrap_parallel(obj: Any) -> Any:
    """The network inside a pickled ``DataParallel`` / ``DistributedDataParallel`` (real, or an inert
    :class:`Record` of one), in any nesting; ``obj`` itself otherwise (it was refused as "not an embedscope
    model" however it was an embedscope model inside)."""
    while True:
        if isinstance(obj, (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)):
            obj = obj.module
        elif isinstance(obj, Record) and type(obj).qualname in _PARALLEL and is_module_record(
                (obj.get("_modules") or {}).get("module")):
            obj = obj.get("_modules")["module"]
        else:
            return obj


def _load_pickled_module(obj: Any, path: Path, *, arch: str | None, embed_dim: int | None,
                         unsafe_pickle: bool = False) -> tuple[EmbeddingModel, dict[str, Any], dict[str, Any]]:
    """A whole pickled module as a checkpoint.

    Its forward pass and its settings (normalisation, input convention, pooling, head) are the code
    and attributes of its class, not tensors: read inertly (no ``--unsafe-pickle``) they are lost,
    so the file is refused. With ``--unsafe-pickle`` an embedscope :class:`EmbeddingModel` is used as
    it is; other modules are refused (embedscope cannot tell what their forward computes).
    """
    obj = _unwrap_parallel(obj)
    qual = obj.qualname if isinstance(obj, Record) else f"{type(obj).__module__}.{type(obj).__qualname__}"
    if isinstance(obj, Record) and qual == f"{EmbeddingModel.__module__}.{EmbeddingModel.__qualname__}":
        if unsafe_pickle:  # read inertly all the same: a class inside it is not importable here
            raise EmbedscopeError(
                f"{path}: holds a whole pickled embedscope model that does not unpickle here even with "
                "--unsafe-pickle (a class inside it is not importable); save model.state_dict() where it was "
                "made and load that with --arch")
        raise EmbedscopeError(
            f"{path}: holds a whole pickled embedscope model (torch.save(model)); its settings are restored only "
            "by unpickling it with --unsafe-pickle (nothing was run; pass it only if you trust the file), or save "
            "model.state_dict() and load that with --arch")
    if not isinstance(obj, EmbeddingModel):
        raise EmbedscopeError(
            f"{path}: holds a whole pickled {printable(qual, 60)} module (torch.save(model)), not an embedscope "
            "model: embedscope cannot tell what its forward computes; give the file to --weights (a backbone, with "
            "--arch) or --trunk/--embedder, which read only its tensors")
    model = obj
    if arch and arch != model.arch:
        raise EmbedscopeError(f"{path}: the pickled model is a {printable(model.arch, 40)}, not {printable(arch, 40)}")
    if embed_dim and embed_dim != model.embed_dim:
        raise EmbedscopeError(f"{path}: the pickled model embeds in {model.embed_dim} dimensions, not {embed_dim}")
    config = default_config(model.arch, embed_dim=model.embed_dim, normalize=model.normalize,
                            frozen_bn=model.frozen_bn, head=model.head_kind, source_format=PICKLED_FORMAT)
    config.pop("input_space", None)
    if model.preprocess is not None:
        config["input_space"] = dict(model.preprocess.spec)
    if getattr(model.backbone, "transform_input", False):
        config["transform_input"] = True
    if getattr(model.backbone, "pool", None) in ("avg", "avg+max"):
        config["pool"] = model.backbone.pool
    if model.head_kind == "mlp":
        config["head_layers"] = [[m.in_features, m.out_features] if isinstance(m, torch.nn.Linear) else "relu"
                                 for m in model.head]
    model.eval()
    # a model pickled in half precision (model.half()): run in float32, as every other source is (it failed
    # with "Input type (float) and bias type (c10::Half) should be the same"); said once and recorded
    sd = model.state_dict()
    low: dict[str, int] = {}
    for v in sd.values():
        if v.is_floating_point() and v.element_size() < 4:
            low[_dtype_name(v.dtype)] = low.get(_dtype_name(v.dtype), 0) + 1
    upcast = ""
    if low:
        model.float()
        upcast = say_upcast(low, path, sd)
    return model, config, {"sha256": sha256_file(path), "extra": {}, "path": str(path),
                           "format": PICKLED_FORMAT + upcast}


#: The keys of a training checkpoint written by timm's ``train.py`` (its ``CheckpointSaver``), besides
#: ``state_dict``: ``{"epoch", "arch", "optimizer", "version", "state_dict"[, "state_dict_ema", "args", ...]}``
_TIMM_TRAINING_KEYS = ("epoch", "arch", "version")


def _weights_layout(model: EmbeddingModel) -> str:
    """Whose layer names a state dict that fits ``model``'s backbone has: "timm ", "torchvision " or ""."""
    if str(getattr(model, "arch", "")).startswith("timm:"):
        return "timm "
    top = type(model.backbone).__module__.split(".")[0]
    return f"{top} " if top in ("timm", "torchvision") else ""


def _weights_format(obj: Any, path: Path, model: EmbeddingModel, ema_key: str | None) -> str:
    """What ``--weights`` read, for the ``checkpoint_format`` of the files it makes (``info`` shows it):
    "backbone weights from a timm training checkpoint (state_dict_ema)", "... from a torchvision state
    dict", "... from a timm state dict (safetensors)". Every such file was "ImageNet backbone weights",
    which named neither the format read (a timm training checkpoint, its EMA copy) and said ImageNet of
    weights trained on anything."""
    key = ema_key or "state_dict"
    if isinstance(obj, dict) and (obj.get("state_dict") is not None or ema_key):
        if all(k in obj for k in _TIMM_TRAINING_KEYS):
            what = f"a timm training checkpoint ({key})"
        elif obj.get("format") == FORMAT:
            what = f"an embedscope checkpoint ({key}, its backbone)"
        else:
            what = f"a training checkpoint ({key})"
    elif not ema_key and training_state_key(obj) is not None:
        what = f"a training checkpoint ({training_state_key(obj)})"
    elif is_module_record(obj):
        what = f"a pickled {_weights_layout(model)}module"
    else:
        what = f"a {_weights_layout(model)}state dict"
        if _sniff(path) == "safetensors":
            what += " (safetensors)"
    return f"backbone weights from {what}"


class SubmoduleWarning(EmbedscopeWarning):
    """``--weights`` read the backbone from the keys under one prefix of the file (a training module's
    network, ``net.*``), leaving out keys under others (its loss's or classifier's weights)."""


def submodule_prefix(sd: dict[str, Any], module: torch.nn.Module) -> str | None:
    """The one key prefix (``net.``, ``model.encoder.``: up to three names deep) under which ``sd`` holds
    every tensor of ``module``, when ``sd`` has none of ``module``'s keys as they are: the state dict of
    a training module (PyTorch Lightning's ``{'state_dict': {'net.conv1.weight', ..., 'loss_fn.W'}}``)
    whose network sits under an attribute beside other weights. None when no prefix, or several, fit."""
    fits = fitting_prefixes(sd, module)
    return fits[0] if len(fits) == 1 else None


def key_prefixes(sd: dict[str, Any]) -> list[str]:
    """The key prefixes of ``sd`` up to three names deep (``net.``, ``model.encoder.``), sorted."""
    return sorted({".".join(k.split(".")[:i]) + "." for k in sd for i in range(1, 4) if k.count(".") >= i})


def fitting_prefixes(sd: dict[str, Any], module: torch.nn.Module) -> list[str]:
    """Every prefix of :func:`key_prefixes` under which ``sd`` holds every tensor of ``module`` by name;
    none when ``sd`` has some of ``module``'s keys as they are."""
    own = module.state_dict()
    if set(sd) & set(own):
        return []
    needed = {k for k in own if not k.endswith("num_batches_tracked")}
    return [p for p in key_prefixes(sd) if needed <= {k[len(p):] for k in sd if k.startswith(p)}]


#: a key prefix up to this long is spelled whole in the advice's command (a command naming a shortened prefix
#: matched none of the file's keys); a longer one (no network's names are so long) gets no command
SPELLED_PREFIX = 1000


def py_str(s: str) -> str:
    """A Python string literal of ``s`` as the advice's commands show it: its characters as they are, in quotes
    that ``s`` does not hold (``'a' "'" 'b'`` when it holds both kinds). The line that shows the message escapes
    it once (:func:`embedscope.text.safe`: a control character as ``\\x1b``, a backslash doubled), which is then
    the same literal; ``repr`` escaped it first, and shown so a backslash of the key was four (a command naming
    another key). A lone surrogate (a key made of an undecodable file name) is ``chr(0xdc80)``: the line shows
    it as the byte, ``\\x80``, which in a literal is another character."""
    parts = re.split(r"([\ud800-\udfff])", s)
    if len(parts) > 1:
        return " + ".join(f"chr({ord(p):#x})" if i % 2 else py_str(p) for i, p in enumerate(parts) if p)
    if "'" not in s:
        return f"'{s}'"
    if '"' not in s:
        return f'"{s}"'
    return " \"'\" ".join(f"'{part}'" for part in s.split("'"))


def sh_arg(s: Any) -> str:
    """One argument of a command line the advice suggests (``--weights PATH``), quoted for a shell as the line
    that shows it (escaped once, :func:`embedscope.text.safe`) will have it, in POSIX sh (dash) whenever it
    can be: a string :func:`safe` leaves as it is gets :func:`shlex.quote` (single quotes, a ``'`` of it
    ``'"'"'``: a space or a ``$`` of a path broke the pasted command); one whose only escaped characters are
    backslashes (shown doubled) gets its other runs in single quotes and each backslash bare (the line shows
    ``'my run'\\\\r.pth``, which any POSIX shell reads as one backslash: in single quotes the shown backslash
    was two). A string holding a character the line escapes as ``\\x1b``, ``\\n``, ``\\u202e`` or ``\\x80``
    (a control or other non-printable character, an undecodable file-name byte) cannot be written on one
    line in POSIX sh without printing it raw: it is in bash's and zsh's ``$'...'`` quotes, which read those
    escapes back as the characters, a ``'`` of it spelled ``"'"`` between them; a message with such an
    argument says so (:func:`bash_note`)."""
    import shlex

    from embedscope.text import safe

    s = str(s)
    if safe(s) == s:
        return shlex.quote(s)
    if s.isprintable():  # (only its backslashes escaped: each bare, the line shows it as \\, POSIX's escaped \)
        return "\\".join(shlex.quote(part) if part else "" for part in s.split("\\"))
    return "\"'\"".join(f"$'{part}'" if part else "" for part in s.split("'"))


#: what a message adds at its end when a command it suggests has an argument in ``$'...'`` quotes
#: (:func:`sh_arg`): a clause of its own after the sentence, not a second aside beside the command's
#: ``--head none (or --head random ...)`` or ``(torch.save({}, 'identity.pth'))``
BASH_NOTE = "; the $'...' quotes are bash's and zsh's: plain sh does not read them"


def bash_note(*args: Any) -> str:
    """:data:`BASH_NOTE` when :func:`sh_arg` quotes one of ``args`` (the arguments of a suggested command,
    None for none) in bash's ``$'...'``, else ``""``."""
    return BASH_NOTE if any(a is not None and not str(a).isprintable() for a in args) else ""


def resave_hint(comprehension, container: tuple[str, ...] | None = None) -> str:
    """The command that saves a file's state dict changed by ``comprehension`` (a function of the expression
    naming the state dict, giving the new one's). ``container``: the keys under which the file keeps the state
    dict (``("state_dict",)`` of an embedscope checkpoint): the command then keeps the rest of the file (its
    ``config``, ``format``: saved as a bare state dict it lost them and needed ``--arch``); none: the file is
    the state dict (``sd``)."""
    if not container:
        return f"torch.save({comprehension('sd')}, FILE)"
    where = "ckpt" + "".join(f"[{py_str(k)}]" for k in container)
    return f"ckpt = torch.load(FILE); {where} = {comprehension(where)}; torch.save(ckpt, NEW_FILE)"


def _too_long(prefixes) -> str | None:
    """The words for a prefix too long to spell in a command (:data:`SPELLED_PREFIX`); None when none is."""
    long = next((p for p in prefixes if len(p) > SPELLED_PREFIX), None)
    return None if long is None else f"its {len(long)}-character prefix '{printable(long, 60)}*'"


def save_one_hint(prefix: str, container: tuple[str, ...] | None = None) -> str:
    """The line that saves the keys under ``prefix`` alone, without it (``prefix``: as the file's keys have it,
    the prefixes :func:`strip_prefix` removed included: the advice named ``'a.'`` for ``module.a.*`` keys,
    which saved nothing). The prefix is spelled whole (shortened, the command matched no key); one longer than
    :data:`SPELLED_PREFIX` gets words, no command. ``container``: see :func:`resave_hint`."""
    long = _too_long([prefix])
    if long is not None:
        return f"the keys under {long} without it"
    return resave_hint(lambda sd: f"{{k[{len(prefix)}:]: v for k, v in {sd}.items() if k.startswith({py_str(prefix)})}}",
                       container)


def check_one_prefix(sd: dict[str, Any], module: torch.nn.Module, path: Any, what: str, key_prefix: str = "",
                     container: tuple[str, ...] | None = None) -> None:
    """A one-line error when the keys under two or more prefixes each hold every tensor of ``module`` (a
    network and its EMA copy, a teacher and a student): which one to read is not guessed. ``key_prefix``:
    what the file's keys have in front of ``sd``'s (``module.``), named in the line; ``container``: where the
    file keeps ``sd`` (:func:`resave_hint`)."""
    fits = [key_prefix + p for p in fitting_prefixes(sd, module)]
    if len(fits) > 1:
        names = ", ".join(f"'{printable(p, 60)}*'" for p in fits[:4]) + (f" (+{len(fits) - 4} more)" if len(fits) > 4
                                                                         else "")
        raise EmbedscopeError(
            f"{path}: the keys under {len(fits)} prefixes each hold the whole {what} ({names}): which one to read "
            f"is not guessed; save the one to embed alone, e.g. {save_one_hint(fits[0], container)}")


def read_submodule(sd: dict[str, Any], sub: str, path: Any, what: str,
                   module: torch.nn.Module | None = None) -> dict[str, Any]:
    """``sd``'s keys under ``sub`` without it; a :class:`SubmoduleWarning` names the keys left out. With
    ``module`` (what is read), it also names another prefix under which the file holds every parameter of
    ``module`` but not its buffers (BatchNorm's running statistics): an EMA copy of the parameters only,
    which could not be read alone (its layers' statistics are not there) and so was left out."""
    left = [k for k in sd if not k.startswith(sub)]
    if left:
        why = ""
        if module is not None:
            params = {n for n, _ in module.named_parameters()}
            buffers = {n for n, _ in module.named_buffers() if not n.endswith("num_batches_tracked")}
            partial = [p for p in key_prefixes({k: None for k in left}) if p != sub and buffers and params
                       <= {k[len(p):] for k in left if k.startswith(p)}]
            if partial:
                p = printable(partial[0], 60)
                why = (f"; its '{p}*' keys hold every parameter of the {what} but not its buffers (BatchNorm's "
                       "running statistics: an EMA of the parameters only?): they cannot be read alone, and were "
                       f"not mixed with the '{printable(sub, 60)}*' buffers")
        warnings.warn(SubmoduleWarning(
            f"{printable(path, 1000)}: the {what} was read from its '{printable(sub, 60)}*' keys; "
            f"{len(left)} other key(s) left out: {_keys_preview(left, 3)}{why}"), stacklevel=3)
    return {k[len(sub):]: v for k, v in sd.items() if k.startswith(sub)}


def load_backbone_weights(model: EmbeddingModel, path: str | os.PathLike, *, unsafe_pickle: bool = False,
                          ema: bool = False) -> str:
    """Load pretrained backbone weights (e.g. torchvision's ImageNet ResNet-50 file) from a local file;
    return what was read, in words (:func:`_weights_format`: "backbone weights from a timm training
    checkpoint (state_dict)", "backbone weights from a torchvision state dict", ...).

    The classifier (``fc.*``, ``last_linear.*``, ``classifier.*`` ... whatever layer the backbone
    replaced; for timm models the one ``pretrained_cfg["classifier"]`` names, e.g. ``head.fc``)
    and auxiliary classifiers are dropped; every backbone tensor must match. There is no download.
    A training checkpoint's ``state_dict`` is used, or with ``ema`` its EMA copy (timm's
    ``state_dict_ema``, :func:`ema_state_dict`; a file without one is a one-line error).
    A dropped last linear layer of another output size than an ImageNet classifier's (perhaps the
    user's embedding layer) gives a :class:`DroppedLayerWarning` naming it (:func:`trained_last_layers`).
    The state dict of ``nn.Sequential(*list(model.children())[:-1])``, its layers numbered, is read
    as the model's own layers (:func:`children_keys`).
    """
    from embedscope.models.adapters import detect_arch, is_pml_pair

    read = obj = read_checkpoint(path, unsafe_pickle=unsafe_pickle)
    if is_pml_pair(obj):  # (was "no tensors found (keys: trunk, embedder)")
        raise EmbedscopeError(f"{path}: holds a pytorch-metric-learning trunk and embedder ('trunk', 'embedder'): "
                              "give it as the checkpoint, without --weights")
    ema_key = None
    if ema:
        obj = ema_state_dict(obj, path)
        ema_key = next(k for k in EMA_KEYS if read.get(k) is not None)
    if is_module_record(obj):
        obj = module_state_dict(obj)
    check_one_training_state(obj, path)
    if isinstance(obj, dict) and obj.get("state_dict") is not None:  # ({'state_dict': None, 'model': ...}: model)
        obj = obj["state_dict"]
    elif training_state_key(obj) is not None:  # {'model': ..., 'optimizer': ...} (torchvision's references)
        obj = obj[training_state_key(obj)]
    if not isinstance(obj, dict):
        raise EmbedscopeError(f"{path}: expected a state dict of backbone weights, got {type(obj).__name__}")
    removed, sd = split_prefix({k: v for k, v in obj.items() if isinstance(k, str) and isinstance(v, torch.Tensor)})
    if not sd and obj and all(is_numpy_array(v) for v in obj.values()):
        raise EmbedscopeError(f"{path}: no tensors found: its values are numpy arrays (keys: "
                              f"{_keys_preview(list(map(str, obj)))}); {NUMPY_HINT}")
    if not sd:
        raise EmbedscopeError(f"{path}: no tensors found (keys: {_keys_preview(list(map(str, obj)))})")
    bb_keys = False
    if any(k.startswith("backbone.") for k in sd):
        # an embedscope model's state dict: its backbone under 'backbone.*'. Not when the keys as they are hold
        # the whole backbone (a network with a layer named 'backbone': as they are), nor a guess when both do
        # (the 'backbone.*' keys were read, the others left out with a warning calling them a model's head)
        needed = {k for k in model.backbone.state_dict() if not k.endswith("num_batches_tracked")}
        inner = {k[len("backbone."):]: v for k, v in sd.items() if k.startswith("backbone.")}
        left = [k for k in sd if not k.startswith("backbone.")]
        if needed <= set(sd) and needed <= set(inner) and not any(k.startswith("backbone.") for k in needed):
            raise EmbedscopeError(
                f"{path}: both its 'backbone.*' keys and its other keys hold the whole "
                f"{printable(model.arch, 40)} backbone: which one to read is not guessed; save the one to embed "
                f"alone, e.g. {save_one_hint(removed + 'backbone.')}")
        if not needed <= set(sd):
            sd, bb_keys = inner, True
            if left:
                if any(k.startswith("head.") for k in left):  # an embedscope model's head (its embedding layer)
                    how, note = (" with --ema" if ema else ""), ""
                    if not (isinstance(read, dict) and read.get("format") == FORMAT):
                        how += f" with --arch {sh_arg(model.arch)}"
                        note = bash_note(model.arch)
                    why = (f"an embedscope model's head: --weights gives a backbone only; to embed with the head, "
                           f"give the file as the checkpoint{how}, without --weights{note}")
                else:  # (was said to be an embedscope model's head whatever they were: a loss's weights, ...)
                    why = "not part of the backbone: --weights gives a backbone only"
                warnings.warn(SubmoduleWarning(
                    f"{printable(path, 1000)}: --weights read its 'backbone.*' keys; {len(left)} other key(s) not "
                    f"loaded: {_keys_preview(left, 3)} ({why})"), stacklevel=2)
    numbered = children_keys(sd, model.backbone) if not set(sd) & set(model.backbone.state_dict()) else None
    if numbered is not None:  # nn.Sequential(*list(model.children())[:-1]): its layers by number
        sd = numbered
    sub = submodule_prefix(sd, model.backbone) if numbered is None else None
    if sub is not None:  # a Lightning module's network beside its loss's weights: {'net.*', 'loss_fn.W'}
        sd = read_submodule(sd, sub, path, "backbone", model.backbone)
    elif numbered is None:
        check_one_prefix(sd, model.backbone, path, f"{printable(model.arch, 40)} backbone",
                         removed + ("backbone." if bb_keys else ""))
    renamed = {torchvision_name(k): k for k in sd}  # (renamed key -> the file's)
    sd = {torchvision_name(k): v for k, v in sd.items()}
    drop = ["fc.", "last_linear.", "aux1.", "aux2.", "AuxLogits."]
    drop += [c + "." for c in classifier_names(model.backbone)]
    # a last linear layer of another size than an ImageNet classifier's: perhaps the user's embedding layer,
    # dropped as a classifier would be (the file was embedded as the features before it, silently)
    own = trained_last_layers(sd, [c + "." for c in classifier_names(model.backbone)] + ["fc.", "last_linear."])
    sd = {k: v for k, v in sd.items() if not k.startswith(tuple(drop))}
    key_prefix = None if numbered is not None else removed + ("backbone." if bb_keys else "") + (sub or "")
    file_key = torchvision_file_key(renamed, key_prefix)
    hint = ""
    timm = timm_key(sd) if not str(model.arch).startswith("timm:") else None
    if timm is not None and not set(sd) & set(model.backbone.state_dict()):
        # (the torchvision model of the same name has other key names: every key missing, every one unexpected)
        hint = (f"; its key names are timm's (e.g. {printable(timm, 60)}), not torchvision's {printable(model.arch, 40)}"
                f"'s: give it as --arch timm:NAME (needs the timm package)")
    upcast = load_into(model.backbone, sd, str(path), f"the {printable(model.arch, 40)} backbone", hint=hint,
                       key_prefix=key_prefix, file_key=file_key)
    if own:
        name, n_in, n_out = own[0]
        warnings.warn(DroppedLayerWarning(
            f"{printable(path, 1000)}: its {printable(name, 40)} layer ({n_in} -> {n_out}, not an ImageNet "
            f"classifier's size) is not loaded: --weights reads the backbone, the {n_in}-d features before it"
            # the trunk route reads a file's state_dict (not its EMA copy) into torchvision's models
            + ("" if ema or str(model.arch).startswith("timm:")
               else f"; {keep_layer_hint(path, None if detect_arch(sd) else model.arch)}")), stacklevel=2)
    fmt = _weights_format(read, Path(path), model, ema_key)
    if bb_keys and not (isinstance(read, dict) and read.get("format") == FORMAT):  # (that one says "its backbone")
        fmt += " (its 'backbone.*' keys)"
    if sub is not None:
        fmt += f" (its '{printable(sub, 60)}*' keys)"
    if numbered is not None:
        fmt += " (numbered as an nn.Sequential of the model's children)"
    return fmt + say_upcast(upcast, path, sd)
