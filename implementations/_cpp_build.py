"""Building tiled_fused's C++ extension: flags for the baseline instruction set, a cache name that
carries that ISA and the sources' hash, and a failed build turned into a one-line reason.

Torch caches builds in ``TORCH_EXTENSIONS_DIR`` (default ``~/.cache/torch_extensions``) by name. The
name carries the ISA the code is compiled for (AVX2 or generic, never -march=native), so a cache
shared by different CPUs never hands one code it cannot run; AVX-512 code paths are compiled per
function (target attributes) and chosen at run time. It also carries a hash of the sources, so two
checkouts with different sources (say, two work trees) never rebuild over each other's cached module.
No ``-ffast-math``: masked keys rely on IEEE infinities.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from types import ModuleType

import torch


def isa_flags() -> tuple[str, list[str]]:
    """The baseline instruction set to compile for: AVX2 + FMA where this CPU (as torch sees it) has them."""
    capability = torch.backends.cpu.get_cpu_capability()
    if capability in ("AVX2", "AVX512"):
        return "avx2", ["-mavx2", "-mfma"]
    return "generic", []


def extension_name(prefix: str, isa: str, sources: list[Path]) -> str:
    """``prefix_isa_hash``: the first 10 hex digits of a SHA-1 over the Python environment (``sys.prefix``), the
    sources and the headers beside them."""
    digest = hashlib.sha1()
    # the interpreter too: two environments (a venv, the system Python) loading one cached name rewrite its
    # build.ninja with their own include paths and rebuild it in turn, and a worker killed mid-build leaves
    # torch's lock file behind, on which every later load waits forever
    digest.update(sys.prefix.encode() + b"\0")
    headers = sorted({h for s in sources for h in s.parent.glob("_flash_*.h")})
    for path in [*sources, *headers]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return f"{prefix}_{isa}_{digest.hexdigest()[:10]}"


def built_before(name: str) -> bool:
    """Whether torch's extension cache already holds a build of ``name``."""
    from torch.utils.cpp_extension import _get_build_directory

    try:
        return any(Path(_get_build_directory(name, verbose=False)).glob(f"{name}*.so"))
    except OSError:  # an unwritable cache directory: the build will say why
        return False


def build(sources: Path | list[Path], name: str, flags: list[str],
          build_directory: Path | None = None) -> ModuleType | str:
    """Compile (or load from torch's cache) ``sources`` as extension ``name``; on failure, the reason:
    the compiler's error lines, so ``attnbench list`` and skipped cells say what went wrong."""
    from torch.utils import cpp_extension

    try:
        cpp_extension.verify_ninja_availability()
        if build_directory is not None:
            build_directory.mkdir(parents=True, exist_ok=True)
        paths = [sources] if isinstance(sources, Path) else sources
        return cpp_extension.load(name=name, sources=[str(p) for p in paths], extra_cflags=["-O3", *flags],
                                  verbose=False, build_directory=None if build_directory is None else str(build_directory))
    except (RuntimeError, OSError, ImportError) as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        noise = ("Error building", "FAILED:", "ninja: build stopped", "[")  # ninja's framing, the commands
        useful = [line for line in lines if " -isystem " not in line and not line.startswith(noise)] or lines
        errors = [line for line in useful if "error" in line.lower() or "not found" in line.lower()] or useful
        return "C++ extension did not build: " + " | ".join(errors[:3])[:600]
