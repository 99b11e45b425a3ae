"""The trackers ``--track`` takes: one entry each, the one list every part reads (the options and their checks, the
doctor, the run's recorder and the view's note, the shipper, the handles' ``tracking``).

An entry says what the kernel needs to record to the tracker and what the options mean for it; the tracker's own
module under ``tracking/`` (``module``: its sink, found by ``tracking/sinks.py``) says what a run, a batch of
metric points, a file and a run's end become there. A new tracker is one module there and one entry here; every
other part (the options, the doctor, the recorder, the view's note, the runs panel's links) reads its entry.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

__all__ = ["Tracker", "REGISTRY", "names", "tracker", "experiment_trackers"]


@dataclass(frozen=True)
class Tracker:
    name: str               # --track NAME
    title: str              # how messages and the view name it
    package: str            # what the kernel imports to record to it (the ranks need nothing)
    extra: str              # the pyproject extra that installs it
    pip: str                # the package's own name on the index
    module: str             # tracking/<module>.py: its sink
    experiment: str | None  # what --experiment names in it (None: it takes none)
    files: bool             # its records are files under --logdir
    why: str = ""           # what it needs the package for, when the title alone does not say
    experiment_env: str | None = None  # the environment variable that names the experiment when --experiment does not

    @property
    def missing(self) -> str:
        """What to do when the kernel's environment lacks the package."""
        need = self.why or f"{self.title} in the kernel's environment"
        return (f"--track {self.name} needs {need}: `pip install 'jupyter-torchdist[{self.extra}]'` (or `pip install "
                f"{self.pip}`), then restart the kernel")


_ALL: Final = (
    Tracker("mlflow", "MLflow", "mlflow", "mlflow", "mlflow", "mlflow_sink", "the MLflow experiment", False),
    Tracker("tensorboard", "TensorBoard", "tensorboard", "tensorboard", "tensorboard", "tb_sink", None, True,
            why="TensorBoard (its own writer writes the event files)"),
    Tracker("wandb", "W&B", "wandb", "wandb", "wandb", "wandb_sink", "the W&B project", False,
            why="Weights & Biases' client (wandb) in the kernel's environment", experiment_env="WANDB_PROJECT"),
)
REGISTRY: Final[Mapping[str, Tracker]] = MappingProxyType({t.name: t for t in _ALL})


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def tracker(name: str) -> Tracker:
    return REGISTRY[name]


def experiment_trackers() -> tuple[str, ...]:
    """The trackers ``--experiment`` names something in."""
    return tuple(t.name for t in _ALL if t.experiment is not None)
