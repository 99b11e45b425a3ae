"""What of the notebook's own code and files travels with a run (``CodeShip``, in ``RunPlan.code``).

The kernel names each folder by its content (``Bundle.digest``); a rank's host fetches the bytes from the kernel's
channel only for a digest it has not seen (``rank/code_setup.py``), so an unchanged folder costs a rerun nothing and an
edited one is new content under a new name: no host can hand a rank the old copy. A rank whose host sees the very
folder the kernel does (the same machine and directory: ``Bundle.identity``) uses it in place.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal, TypedDict, Union

__all__ = ["Bundle", "PipSet", "CodeShip", "NeededImport", "FETCH", "BLOB", "FetchMsg", "BlobMsg", "FilesMessage"]

# -- on a files connection (``ROLE_FILES``): one request, one answer, as often as a host needs ---------------------
FETCH: Final = "fetch"  # a rank's host asks the kernel for a digest's bytes (a bundle's zip, a wheel)
BLOB: Final = "blob"    # the kernel's answer


class FetchMsg(TypedDict):
    t: Literal["fetch"]
    digest: str


class _Blob(TypedDict):
    t: Literal["blob"]
    data: bytes | None     # None: the kernel has no such digest (any more)


class BlobMsg(_Blob, total=False):
    error: str             # why it could not make them (the files changed while the run started)


FilesMessage = Union[FetchMsg, BlobMsg]


@dataclass(frozen=True)
class Bundle:
    """A folder's files that travel with a run, named by their content."""

    digest: str                      # sha256 of its path and listing (names, sizes, times): the hosts' cache key
    root: str                        # the folder on the kernel's machine
    entries: tuple[str, ...] = ()    # the top-level modules and packages it holds; () means the whole folder
    identity: str = ""               # the kernel's machine and directory (core.code_folder.identity): seen in place
    size: int = 0                    # bytes, all files
    files: int = 0


@dataclass(frozen=True)
class PipSet:
    """``--pip`` and ``--requirements``: installed once per host into an overlay keyed by ``digest``."""

    digest: str
    specs: tuple[str, ...]                   # as pip takes them; a shipped wheel is named by "wheel:<digest>"
    wheels: tuple[tuple[str, str], ...] = ()  # (digest, file name) of each wheel that travels from the kernel
    requirements: str = ""                   # the text of --requirements (its own lines, as pip reads them)


@dataclass(frozen=True)
class NeededImport:
    """A package the run's code imports that no bundle carries: every rank's Python must have it."""

    name: str                  # top-level import name ("sklearn")
    dist: str = ""             # its distribution in the kernel ("scikit-learn"), what --pip would name
    version: str = ""          # the kernel's version of it (a different one on a host is a warning)


@dataclass(frozen=True)
class CodeShip:
    """The notebook's working directory, its other modules, the run's packages, and what the ranks must import."""

    workdir: Bundle | None = None                  # each rank's current folder and first sys.path entry
    modules: tuple[Bundle, ...] = ()               # modules from the kernel's other sys.path entries the run uses
    pip: PipSet | None = None
    needs: tuple[NeededImport, ...] = field(default_factory=tuple)

    @property
    def bundles(self) -> tuple[Bundle, ...]:
        return ((self.workdir,) if self.workdir is not None else ()) + self.modules

    def digests(self) -> tuple[str, ...]:
        """Everything a host may fetch for it: each bundle's digest and each wheel's."""
        return tuple(b.digest for b in self.bundles) + (
            tuple(d for d, _ in self.pip.wheels) if self.pip is not None else ())
