"""The LLM judge: any OpenAI-compatible chat-completions endpoint (see `judge.OpenAIJudge`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from assay.judges.openai.judge import OpenAIJudge
    from assay.judges.openai.settings import LLMSettings, settings_from_env

__all__ = ["LLMSettings", "OpenAIJudge", "configure", "settings_from_env"]


def __getattr__(name: str) -> Any:
    # Imported on first use: the SDK import costs time and `import assay.judges` stays free.
    if name == "OpenAIJudge":
        from assay.judges.openai.judge import OpenAIJudge

        return OpenAIJudge
    if name in ("LLMSettings", "settings_from_env"):
        from assay.judges.openai import settings

        return getattr(settings, name)
    raise AttributeError(name)


def configure(band: tuple[float, float] | None = None, **overrides: Any) -> LLMSettings:
    """Re-register judges "openai" and "cascade" with settings from the environment plus
    `overrides` (LLMSettings field names; None values are ignored). Used by the CLI's flags.

    band: the cascade's uncertainty band; default from `$ASSAY_CASCADE_BAND`.
    Returns the settings in force. Raises RequestValidationError naming a bad field.
    """
    from assay.judges import get_judge, register_judge
    from assay.judges.cascade import CascadeJudge, band_from_env
    from assay.judges.openai.judge import OpenAIJudge
    from assay.judges.openai.settings import settings_from_env

    given = [name for name, value in overrides.items() if value is not None]
    settings = settings_from_env(overridden=given).with_overrides(**overrides)
    chosen_band = band or band_from_env()
    register_judge("openai", lambda: OpenAIJudge(settings))
    register_judge(
        "cascade",
        lambda: CascadeJudge(get_judge("embedded"), get_judge("openai"), chosen_band),
    )
    return settings
