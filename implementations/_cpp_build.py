"""Building tiled_fused's C++ extension: flags for the baseline instruction set, a cache name that
carries that ISA and the sources' hash, and a failed build turned into a one-line reason.

Instruction sets: one mechanism for every kernel. An extension is compiled whole for one level of
:data:`ISAS` (its flags; never -march=native) and loaded only where :func:`cpu_runs` says the CPU has that
level's features (asked of torch's cpuinfo, :func:`torch.cpu.get_capabilities`): code of a level the CPU
lacks is never even loaded, so nothing in it (static initialisers included) can fault. No source selects
an instruction set itself (no ``#pragma GCC target``, no target attributes); a source compiled at a lower
level than its kernels need compiles them out and the loader does not offer them. Code shared by several
levels is a template over a traits type (a kernel's, a lane type's), instantiated in each level's build.

Torch caches builds in ``TORCH_EXTENSIONS_DIR`` (default ``~/.cache/torch_extensions``) by name. The
name carries the level the code is compiled for, so a cache shared by different CPUs never hands one
code it cannot run. It also carries a hash of the sources' contents
and of the Python and torch that build it, so one checkout used from two environments (a venv beside
the system Python) never rebuilds over the other's cached module. The sources are compiled from a
copy inside the build directory, not from where the package lives: ninja's build file names the
sources' paths, so a copy of the same package elsewhere (Ray unpacks one per cluster session on
every node, a second work tree) would otherwise rebuild for minutes over the cached module; this way
identical sources share one build wherever they come from. No ``-ffast-math``: masked keys rely on IEEE infinities.

Torch serialises builds with a file named ``lock`` that the builder deletes when done; a builder
that is killed (a case's timeout, a test's SIGKILL) leaves it behind, and every later build of that
name then waits for it forever. :func:`build` therefore holds an ``flock`` while it builds, which
dies with its process: whoever holds it knows a ``lock`` file it finds is stale, and removes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
KERNELS = Path(__file__).with_name("kernels")
"""The C++ sources and headers of the compiled plugins (tiled_fused, tiled_decode), one folder."""


@dataclass(frozen=True)
class Isa:
    """One instruction-set level an extension is compiled for: the compiler flags of the whole extension,
    and the CPU features (keys of :func:`torch.cpu.get_capabilities`) a CPU needs to load it."""

    name: str
    flags: tuple[str, ...]
    features: tuple[str, ...]


_AVX2 = Isa("avx2", ("-mavx2", "-mfma", "-mf16c"), ("avx2", "fma3", "f16c"))
_AVX512F = Isa("avx512f", (*_AVX2.flags, "-mavx512f"), (*_AVX2.features, "avx512_f"))
ISAS = {isa.name: isa for isa in (
    Isa("generic", (), ()),
    _AVX2,
    _AVX512F,
    Isa("avx512_bf16", (*_AVX512F.flags, "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16"),
        (*_AVX512F.features, "avx512_bw", "avx512_vl", "avx512_dq", "avx512_bf16")),
)}
"""The levels, lowest first; each includes the one before it."""


CAP = "ATTNBENCH_ISA_CAP"
"""Environment variable that makes every built-in treat this CPU as one of a lower level of :data:`ISAS`
(``avx2``, ``generic``): a level above the cap is "not run by this CPU" with the cap as its reason, so the
tests and commands of a lower tier run on a higher one. It caps attnbench's own kernels only: torch,
oneDNN, MKL and OpenBLAS read their own variables (:data:`TIER_ENV`; ``scripts/at_tier.py`` sets them all)."""

TIER_ENV = {
    "generic": {CAP: "generic", "ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
                "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "OPENBLAS_CORETYPE": "Nehalem"},
    "avx2": {CAP: "avx2", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
             "MKL_ENABLE_INSTRUCTIONS": "AVX2", "OPENBLAS_CORETYPE": "Haswell"},
    "avx512f": {CAP: "avx512f", "ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
                "MKL_ENABLE_INSTRUCTIONS": "AVX512", "OPENBLAS_CORETYPE": "SkylakeX"},
}
"""What a CPU of each lower tier runs, for every library in the process: attnbench's kernels (:data:`CAP`),
ATen's kernels, oneDNN (which otherwise still sees AMX and asks ATen, capped alone, for a VNNI pack it cannot
do), MKL and OpenBLAS. Read before those libraries load, so they are set on a new process."""


def cap() -> Isa | None:
    """The level :data:`CAP` caps this CPU at, or None when unset; an unknown level is a usage error."""
    name = os.environ.get(CAP, "").strip()
    if not name:
        return None
    if name not in ISAS:
        from harness.errors import UsageError

        raise UsageError(f"{CAP}={name!r}: not a tier; one of {', '.join(ISAS)} (or unset for the CPU's own)")
    return ISAS[name]


def cpu_runs(isa: Isa) -> bool:
    """Whether this CPU runs ``isa``: it has every feature (the hardware's, whatever ATEN_CPU_CAPABILITY says)
    and :data:`CAP` does not cap it below ``isa``."""
    return missing(isa) is None


def missing(isa: Isa) -> str | None:
    """None when this CPU runs ``isa``, else a reason naming the features it lacks, or the cap."""
    capabilities = torch.cpu.get_capabilities()
    lacking = [feature for feature in isa.features if not capabilities.get(feature, False)]
    if lacking:
        return f"this CPU has no {', '.join(lacking)} (the {isa.name} kernels)"
    capped = cap()
    above = [feature for feature in isa.features if capped is not None and feature not in capped.features]
    if capped is not None and above:
        return f"{CAP}={capped.name} caps this CPU below {', '.join(above)} (the {isa.name} kernels)"
    return None


def baseline() -> Isa:
    """The level of the extensions every CPU loads (the MKL-GEMM kernels, tiled_decode's): AVX2 + FMA + F16C
    where the CPU has them (torch's own kernels assume no more), else generic."""
    return _AVX2 if cpu_runs(_AVX2) else ISAS["generic"]


def extension_name(prefix: str, isa: str, sources: list[Path], flags: Sequence[str] = ()) -> str:
    """``prefix_isa_hash``: the first 10 hex digits of a SHA-1 over the contents of the sources and the
    local headers they include (by file name, not by where they are), the Python environment that runs
    (``sys.prefix``, its version), the torch it builds against and any extra compiler or linker ``flags``
    (a build with other flags is another module)."""
    digest = hashlib.sha1(f"{sys.prefix}\0{sys.version}\0{torch.__version__}\0{Path(torch.__file__).parent}".encode())
    if flags:
        digest.update("\0".join(flags).encode())
    for path in _with_headers(sources):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return f"{prefix}_{isa}_{digest.hexdigest()[:10]}"


def _with_headers(sources: list[Path]) -> list[Path]:
    """The sources and the local headers they include (``#include "name.h"`` beside them, transitively):
    a change to one kernel's header rebuilds only the extensions that include it."""
    found: list[Path] = []
    todo = list(sources)
    while todo:
        path = todo.pop()
        for name in _INCLUDE.findall(path.read_text(errors="replace")):
            header = path.parent / name
            if header.is_file() and header not in found:
                found.append(header)
                todo.append(header)
    return [*sources, *sorted(found)]


def _staged(paths: list[Path], directory: Path) -> list[Path]:
    """Copies of ``paths`` (and their headers) in ``directory/sources``, rewritten only when their contents
    differ, so that ninja sees one unchanged source path however many copies of the package exist."""
    staging = directory / "sources"
    staging.mkdir(parents=True, exist_ok=True)
    for path in _with_headers(paths):
        target = staging / path.name
        contents = path.read_bytes()
        if not target.is_file() or target.read_bytes() != contents:
            target.write_bytes(contents)
    return [staging / path.name for path in paths]


def built_before(name: str) -> bool:
    """Whether torch's extension cache already holds a build of ``name``."""
    from torch.utils.cpp_extension import _get_build_directory

    try:
        return any(Path(_get_build_directory(name, verbose=False)).glob(f"{name}*.so"))
    except OSError:  # an unwritable cache directory: the build will say why
        return False


def build(sources: Path | list[Path], name: str, flags: list[str],
          build_directory: Path | None = None, ldflags: list[str] | None = None) -> ModuleType | str:
    """Compile (or load from torch's cache) ``sources`` as extension ``name``; on failure, the reason:
    the compiler's error lines, so ``attnbench list`` and skipped cells say what went wrong. ``flags`` go
    to the compiler, ``ldflags`` to the linker."""
    from torch.utils import cpp_extension

    try:
        cpp_extension.verify_ninja_availability()
        directory = build_directory or Path(cpp_extension._get_build_directory(name, verbose=False))
        paths = [sources] if isinstance(sources, Path) else sources
        with builder_lock(directory):
            staged = _staged(paths, directory)
            return cpp_extension.load(name=name, sources=[str(p) for p in staged], extra_cflags=["-O3", *flags],
                                      extra_ldflags=ldflags or [], verbose=False, build_directory=str(directory))
    except (RuntimeError, OSError, ImportError) as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        noise = ("Error building", "FAILED:", "ninja: build stopped", "[")  # ninja's framing, the commands
        useful = [line for line in lines if " -isystem " not in line and not line.startswith(noise)] or lines
        errors = [line for line in useful if "error" in line.lower() or "not found" in line.lower()] or useful
        return "C++ extension did not build: " + " | ".join(errors[:3])[:600]


@contextlib.contextmanager
def builder_lock(directory: Path) -> Iterator[None]:
    """Held by the one process building into ``directory``; removes torch's stale ``lock`` (see above)."""
    directory.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # no flock (Windows): torch's own lock alone
        yield
        return
    with open(directory / "attnbench.flock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # waits while another process builds; released if it dies
        try:
            (directory / "lock").unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
