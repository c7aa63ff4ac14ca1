"""Run configuration files: the metric's config keys plus an optional `sut:` block.

The published config schema says nothing about where the system under test lives, so a run
config file keeps that in its own block next to the metric keys::

    use_case: {name: ..., description: ..., examples: ...}   # or a profile file's path
    num_ood_queries: 3
    sut:
      kind: openai            # or http
      url: http://127.0.0.1:8000/v1
      model: my-model         # openai only
      system_prompt: true     # openai only: send the profile as system prompt
      body_template: '{"message": "{prompt}"}'   # http only
      reply_path: data.reply                     # http only

A key of the other kind is refused, as is a URL that is not http(s)://host[:port]/... . A
`use_case` path is read relative to the config file.

`parse_run_config` is what the dataset runner (`assay run --metric llm.ood_detection --config`)
validates up front; `build_sut` (shared with `assay ood`) makes the adapter when calls start.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import yaml

from assay.metrics.ood.config import OODMetricConfig, parse_config
from assay.metrics.ood.profile import (
    load_profile,
    not_utf8,
    parse_file_text,
    profile_from_mapping,
)
from assay.metrics.ood.sut import (
    HttpJsonSUT,
    OpenAIChatSUT,
    SystemUnderTest,
    check_body_template,
)
from assay.schema import RequestValidationError

SUT_KEYS = ("kind", "url", "model", "system_prompt", "body_template", "reply_path")
#: The keys only one kind reads, and that kind: given with the other kind they are refused,
#: not ignored.
KIND_OF_KEY = {
    "model": "openai",
    "system_prompt": "openai",
    "body_template": "http",
    "reply_path": "http",
}
_DEFAULT_TEMPLATE = '{"message": "{prompt}"}'


def url_problem(url: str) -> str | None:
    """What is wrong with `url` as the address of a system under test (None if nothing)."""
    if any(character.isspace() for character in url):
        return f"{url!r} holds a space; percent-encode it or drop it"
    try:
        parts = urlsplit(url)
        _ = parts.port  # reading it checks the port ("99999", ":1")
        httpx.URL(url)
    except (ValueError, httpx.InvalidURL) as error:
        return f"{url!r} is not a valid URL: {error}"
    if parts.scheme not in ("http", "https"):
        return f"{url!r} must start with http:// or https://"
    if not parts.hostname:
        return f"{url!r} has no host"
    return None


def check_sut_options(options: Mapping[str, Any], labels: Mapping[str, str] | None = None) -> None:
    """Raise RequestValidationError for a `sut:` block that cannot make an adapter.

    Checks without connecting or opening a client, so a run can be validated up front.
    options, labels: as for `build_sut`.
    """

    def name(key: str) -> str:
        return (labels or {}).get(key, f"sut.{key}")

    unknown = sorted(set(options) - set(SUT_KEYS))
    if unknown:
        raise RequestValidationError(
            name(unknown[0]), f"unknown key; allowed: {', '.join(SUT_KEYS)}"
        )
    url = options.get("url")
    if not isinstance(url, str) or not url.strip():
        raise RequestValidationError(name("url"), "required: the URL of the system under test")
    problem = url_problem(url)
    if problem:
        raise RequestValidationError(name("url"), problem)
    kind = options.get("kind", "openai")
    if kind not in ("openai", "http"):
        raise RequestValidationError(name("kind"), f"must be openai or http (got {kind!r})")
    _check_kind_keys(options, kind, name)
    if kind == "http":
        try:
            check_body_template(str(options.get("body_template", _DEFAULT_TEMPLATE)))
        except ValueError as error:
            raise RequestValidationError(name("body_template"), str(error)) from None


def _check_kind_keys(options: Mapping[str, Any], kind: str, name: Callable[[str], str]) -> None:
    # A key of the other kind would be ignored without a word: refuse it instead.
    for key, for_kind in KIND_OF_KEY.items():
        if key not in options:
            continue
        if for_kind != kind:
            raise RequestValidationError(name(key), f"applies to {name('kind')} {for_kind} only")
        expected = bool if key == "system_prompt" else str
        if not isinstance(options[key], expected):
            what = "true or false" if expected is bool else "a string"
            raise RequestValidationError(name(key), f"must be {what} (got {options[key]!r})")


def build_sut(
    options: Mapping[str, Any],
    config: OODMetricConfig,
    labels: Mapping[str, str] | None = None,
) -> SystemUnderTest:
    """A system-under-test adapter from a `sut:` block (call its `aclose()` when done).

    options: kind ("openai" or "http"), url, and the kind's own keys (see the module doc).
    config: supplies sut_temperature and, for system_prompt, the use-case profile.
    labels: how to name each key in errors (e.g. CLI options); default "sut.<key>".

    The SUT's API key comes from ASSAY_SUT_API_KEY, never from the file: an OpenAI-compatible
    SUT gets it as its API key, an HTTP one as `Authorization: Bearer <key>`.
    """
    check_sut_options(options, labels)
    url = str(options["url"])
    key = os.environ.get("ASSAY_SUT_API_KEY", "").strip()
    if options.get("kind", "openai") == "openai":
        system_prompt = None
        if options.get("system_prompt") and config.use_case:
            profile = profile_from_mapping(config.use_case)
            system_prompt = profile.fields.get("system_prompt", profile.as_prompt())
        return OpenAIChatSUT(
            url,
            model=str(options.get("model", "default")),
            api_key=key or "unused",
            system_prompt=system_prompt,
            temperature=config.sut_temperature,
        )
    return HttpJsonSUT(
        url,
        body_template=str(options.get("body_template", _DEFAULT_TEMPLATE)),
        reply_path=str(options.get("reply_path", "reply")),
        headers={"Authorization": f"Bearer {key}"} if key else None,
    )


def load_run_config(
    path: str | os.PathLike[str],
) -> tuple[OODMetricConfig, SystemUnderTest | None]:
    """Read a run config file: the validated metric config and the SUT, if the file has one.

    path: a YAML or JSON file holding a mapping.
    """
    path = Path(path)
    try:
        data = parse_file_text(path.read_text(encoding="utf-8"), path)
    except UnicodeDecodeError as error:
        raise RequestValidationError(str(path), not_utf8(error)) from None
    except (OSError, ValueError, yaml.YAMLError) as error:
        raise RequestValidationError(str(path), f"cannot read config: {error}") from None
    config, options = parse_run_config(data, str(path), path.parent)
    return config, None if options is None else build_sut(options, config)


def read_use_case(data: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """`data` with a `use_case` given as a profile file's path read into its mapping.

    data: a run config's keys. base: the folder a relative path is read from (the config
    file's). The file is read as `assay ood --use-case` reads one (`load_profile`).
    """
    use_case = data.get("use_case")
    if not isinstance(use_case, str):
        return dict(data)
    path = Path(use_case).expanduser()
    profile = load_profile(path if path.is_absolute() else base / path)
    return {**data, "use_case": profile.fields}


def parse_run_config(
    data: Any, source: str = "config", base: Path | None = None
) -> tuple[OODMetricConfig, dict[str, Any] | None]:
    """The validated metric config and `sut:` block (checked, not built) of a run config.

    data: the mapping of metric keys plus the optional `sut:` block.
    source: how to name the whole config in errors (e.g. its file path).
    base: the folder a `use_case` profile path is relative to (default the working folder).
    """
    if not isinstance(data, dict):
        raise RequestValidationError(source, "must hold a mapping of config keys")
    data = read_use_case(data, base or Path.cwd())
    options = data.pop("sut", None)
    config = parse_config(data)
    if options is None:
        return config, None
    if not isinstance(options, dict):
        raise RequestValidationError("sut", "must be a mapping (kind, url, ...)")
    check_sut_options(options)
    return config, options
