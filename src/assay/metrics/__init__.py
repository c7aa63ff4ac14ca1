"""Metrics with manifests: the manifest model and loader, and platform metrics such as `ood`."""

from assay.metrics.manifest import (
    Manifest,
    ManifestError,
    all_manifests,
    get_manifest,
    render_manifest,
)

__all__ = ["Manifest", "ManifestError", "all_manifests", "get_manifest", "render_manifest"]
