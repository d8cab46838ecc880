"""Check config/settings.json against schemas/settings.schema.json (the subset of JSON Schema it uses:
type, required, properties, minimum); exit 1 naming the first mismatch."""

import json
import sys
from pathlib import Path

TYPES = {"object": dict, "string": str, "integer": int, "number": (int, float)}


def mismatch(value, schema, where="settings"):
    expected = TYPES[schema["type"]]
    if not isinstance(value, expected) or (isinstance(value, bool) and schema["type"] != "boolean"):
        return f"{where}: expected {schema['type']}, got {json.dumps(value)}"
    if "minimum" in schema and value < schema["minimum"]:
        return f"{where}: {value} is below the minimum {schema['minimum']}"
    for key in schema.get("required", []):
        if key not in value:
            return f"{where}: `{key}` is required"
    for key, sub in schema.get("properties", {}).items():
        if key in value and (found := mismatch(value[key], sub, f"{where}.{key}")):
            return found
    return None


if __name__ == "__main__":
    here = Path(__file__).parent
    settings = json.loads((here / "config" / "settings.json").read_text())
    schema = json.loads((here / "schemas" / "settings.schema.json").read_text())
    if problem := mismatch(settings, schema):
        sys.exit(f"config/settings.json does not match its schema: {problem}")
