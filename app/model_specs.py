"""What ``--model`` names: the shipped models by name, and the ONNX export that queries run from,
written once where it is missing."""

from __future__ import annotations

from askalike.app.output import plain, stderr
from askalike.core.extras import require_training


def shipped_models(spec: str | list[str] | None) -> str | list[str] | None:
    """A ``--model`` callback: the shipped models by name (``fast``, ``accurate``) from any directory."""
    from askalike.core.model_dir import shipped_model

    if isinstance(spec, list):
        return [shipped_model(item) for item in spec]
    return None if spec is None else shipped_model(spec)


def with_onnx_export(spec: str) -> str:
    """``spec``, once the encoder that queries run from it exists: a transformer saved without
    its ONNX export, or a ``pretrained:NAME`` peer on first use, is exported now (the one step of
    a query command that needs torch, once per model). Every command that takes ``--model``
    passes it through here before the library loads the encoder."""
    from askalike.core.loader import export_missing

    if export_missing(spec) is not None:
        require_training(f"exporting {spec} to ONNX (once, for queries)")
        from askalike.train.trained_model import export_once

        stderr.print(plain(f"exporting {spec} to ONNX (once; queries then run without torch)…"))
        export_once(spec)
    return spec
