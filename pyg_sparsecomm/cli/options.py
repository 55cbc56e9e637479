"""Arguments shared by the commands: ``[METHOD:]KEY=VALUE`` options of a partitioning method."""
import argparse
import json
from typing import Any

Option = tuple[str | None, str, Any]  # (method it is scoped to or None, key, value)


def parse_value(text: str) -> Any:
    """JSON if it parses (numbers, true/false/null, lists, quoted strings), else the string itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return {"True": True, "False": False, "None": None}.get(text, text)


def parse_option(text: str) -> Option:
    """``[METHOD:]KEY=VALUE`` -> ``(METHOD or None, KEY, parsed VALUE)``."""
    target, sep, value = text.partition("=")
    method, _, key = target.rpartition(":")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"expected [METHOD:]KEY=VALUE, got {text!r}")
    return method or None, key, parse_value(value)
