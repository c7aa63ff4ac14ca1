"""Write (or check) `src/wire.ts`, the TypeScript client's wire types, from the server's schemas.

Every type comes from the server's OpenAPI document (request items, the result shapes the detect
routes answer with, the error body), so the TS types cannot drift: `--check` fails when the
committed file differs from what this renders.

Usage (from `clients/typescript/`, with the repository's virtualenv):
    python scripts/generate_types.py --write               # in-process OpenAPI document
    python scripts/generate_types.py --check --url URL     # a live server's /openapi.json
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path
from typing import Any

import httpx

OUTPUT = Path(__file__).resolve().parent.parent / "src" / "wire.ts"
#: Schemas written, in this order, with whether the server sends (True) or receives them.
SCHEMAS: dict[str, bool] = {
    "DetectorConfig": False,
    "DetectRequestItem": False,
    "InstructionResult": True,
    "DetectorResult": True,
    "DetectorError": True,
    "ErrorBody": True,
}
_REF_PREFIX = "#/components/schemas/"


def openapi_document(url: str | None) -> dict[str, Any]:
    """The OpenAPI document of the server at `url`, or of an app built in this process."""
    if url is not None:
        response = httpx.get(url.rstrip("/") + "/openapi.json", timeout=30.0)
        response.raise_for_status()
        document: dict[str, Any] = response.json()
        return document
    from assay.server import ServerSettings, create_app  # the server stack loads only here

    return create_app(ServerSettings(auth=False)).openapi()


def collect_schemas(document: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The schemas to render by name, and where each came from (for the file's comments)."""
    listed: dict[str, Any] = document.get("components", {}).get("schemas", {})
    schemas: dict[str, dict[str, Any]] = {}
    sources: dict[str, str] = {}
    for name in SCHEMAS:
        if name in listed:
            schemas[name], sources[name] = listed[name], "the OpenAPI document"
        else:
            raise SystemExit(f"schema {name!r} is missing from the server's OpenAPI document")
    return schemas, sources


def type_of(schema: dict[str, Any]) -> str:
    """The TypeScript type for one JSON-schema node (the subset pydantic emits)."""
    if "$ref" in schema:
        return str(schema["$ref"]).removeprefix(_REF_PREFIX)
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return " | ".join(json.dumps(value) for value in schema["enum"])
    if "anyOf" in schema:
        return " | ".join(type_of(option) for option in schema["anyOf"])
    kind = schema.get("type")
    if kind == "string":
        return "string"
    if kind in ("number", "integer"):
        return "number"
    if kind == "boolean":
        return "boolean"
    if kind == "null":
        return "null"
    if kind == "array":
        item = type_of(schema.get("items", {}))
        return f"{item}[]" if item.isidentifier() else f"Array<{item}>"
    if kind == "object" and "properties" not in schema:
        extra = schema.get("additionalProperties", True)
        value = type_of(extra) if isinstance(extra, dict) else "unknown"
        return f"{{ [key: string]: {value} }}"
    if not schema:
        return "unknown"
    raise SystemExit(f"no TypeScript rendering for schema {json.dumps(schema)}")


def _doc(text: str, indent: str) -> list[str]:
    lines = [line.rstrip() for line in text.strip().splitlines()]
    return [f"{indent}/**", *(f"{indent} * {line}".rstrip() for line in lines), f"{indent} */"]


def render_interface(name: str, schema: dict[str, Any], sent_by_server: bool, source: str) -> str:
    """One `export interface`; a field is optional only where a sender may leave it out."""
    lines = _doc(f"{schema.get('description', name)}\n\nFrom {source}.", "")
    lines.append(f"export interface {name} {{")
    required = set(schema.get("required", []))
    for field, field_schema in schema.get("properties", {}).items():
        # The server serialises every field (defaults included), so what it sends is complete.
        optional = "" if sent_by_server or field in required else "?"
        notes = [str(field_schema["description"])] if "description" in field_schema else []
        notes += [
            f"{bound}: {field_schema[bound]}."
            for bound in ("minimum", "maximum", "minProperties")
            if bound in field_schema
        ]
        if "default" in field_schema and not sent_by_server:
            notes.append(f"Default: {json.dumps(field_schema['default'])}.")
        if notes:
            lines += _doc("\n".join(notes), "  ")
        lines.append(f"  {field}{optional}: {type_of(field_schema)};")
    if schema.get("additionalProperties") is True:
        lines.append("  /** Further options are passed through to the detector. */")
        lines.append("  [key: string]: unknown;")
    lines.append("}")
    return "\n".join(lines)


def render(document: dict[str, Any]) -> str:
    """The full text of `src/wire.ts` for an OpenAPI document."""
    schemas, sources = collect_schemas(document)
    header = (
        "// Generated by scripts/generate_types.py from the Assay server's schemas: do not edit.\n"
        "// Regenerate with `npm run generate`; the test suite fails when this file is stale.\n"
    )
    blocks = [
        render_interface(name, schemas[name], SCHEMAS[name], sources[name]) for name in SCHEMAS
    ]
    blocks.append(render_field_lists(schemas))
    return header + "\n" + "\n\n".join(blocks) + "\n"


def render_field_lists(schemas: dict[str, dict[str, Any]]) -> str:
    """`WIRE_FIELDS`: each interface's field names at run time (types vanish when compiled), so
    tests can hold real answers against them; `satisfies` ties each list to its interface."""
    lines = ["/** The field names of each interface above, for checks at run time. */"]
    lines.append("export const WIRE_FIELDS = {")
    for name, schema in schemas.items():
        fields = ", ".join(json.dumps(field) for field in schema.get("properties", {}))
        lines.append(f"  {name}: [{fields}] as const satisfies readonly (keyof {name})[],")
    lines.append("};")
    return "\n".join(lines)


def main(arguments: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="base URL of a running server (default: build in-process)")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help=f"write {OUTPUT.name}")
    mode.add_argument("--check", action="store_true", help=f"fail if {OUTPUT.name} is stale")
    options = parser.parse_args(arguments)
    text = render(openapi_document(options.url))
    if options.write:
        OUTPUT.write_text(text, encoding="utf-8")
        return 0
    current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
    if current != text:
        sys.stderr.write(
            f"{OUTPUT} is stale: the server's schemas changed. Run `npm run generate` in "
            "clients/typescript and review the diff.\n"
        )
        diff = difflib.unified_diff(
            current.splitlines(keepends=True),
            text.splitlines(keepends=True),
            "src/wire.ts (committed)",
            "src/wire.ts (from the server)",
        )
        sys.stderr.writelines(diff)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
