"""What a request asks for beyond its prompt: tools, a tool choice, a response format (a JSON schema), and an agent
task's canned tool results. Read from a ``.jsonl`` prompt file's lines, checked when the file is read (a schema that
is not a schema is refused there, naming the line), and sent in OpenAI's chat completions form.

A line of a tool-call workload::

    {"prompt": "...", "tools": [{"type": "function", "function": {"name": "get_weather",
       "parameters": {...a JSON schema...}}}], "tool_choice": "auto",
     "tool_results": [{"content": "{\\"temp_c\\": 21}", "latency_ms": 150}]}

``tool_results`` makes the line a multi-step task: each time the model answers with tool calls, the client waits
the result's ``latency_ms`` (the tool running), sends each call's result back as a ``tool`` message, and the model
takes the next step; the task ends after its last result is answered, or earlier when the model answers without a
call. ``response_format``: ``{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}`` (OpenAI's) or
``{"type": "json_object"[, "schema": {...}]}`` (llama.cpp's and vLLM's older form).

Schemas are checked and outputs validated by ``jsonschema`` (its validator for the schema's own ``$schema``, Draft
2020-12 when it names none): a maintained validator, never one written here.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from llmbench.core.errors import UserError
from llmbench.workloads import limits

KEYS = ("tools", "tool_choice", "response_format", "tool_results")  # a prompt line's fields this module reads
MAX_STEPS = 100  # tool results of one task: an agent's longest loops are tens of steps


@dataclass(frozen=True)
class ToolResult:
    """One step's canned tool result: what each call of the previous answer gets back, after ``latency_ms``."""

    content: str
    latency_ms: float = 0.0


@dataclass(frozen=True)
class Ask:
    """A request's tools, tool choice and response format (OpenAI's fields, as the file gave them), and a task's
    tool results. ``tools`` and ``response_format`` hold plain JSON values; never mutate them."""

    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    results: tuple[ToolResult, ...] = ()

    def body(self) -> dict[str, Any]:
        """The request body's fields for this ask (none of a task's results: they go back as messages)."""
        out: dict[str, Any] = {}
        if self.tools:
            out["tools"] = list(self.tools)
        if self.tool_choice is not None:
            out["tool_choice"] = self.tool_choice
        if self.response_format is not None:
            out["response_format"] = self.response_format
        return out

    def tool_names(self) -> tuple[str, ...]:
        return tuple(t["function"]["name"] for t in self.tools)

    def tool_schema(self, name: str) -> dict[str, Any] | None:
        """The parameters schema of the tool ``name`` (``{}``: one without parameters); None: no such tool."""
        for t in self.tools:
            if t["function"]["name"] == name:
                return t["function"].get("parameters") or {}
        return None

    def output_schema(self) -> dict[str, Any] | None:
        """The schema the answer's text must match (``{}``: any JSON object, ``json_object``); None: free text."""
        rf = self.response_format
        if rf is None or rf.get("type") == "text":
            return None
        if rf["type"] == "json_schema":
            return rf["json_schema"].get("schema") or {}
        return rf.get("schema") or {"type": "object"}

    def constraint_sha256(self) -> str | None:
        """What a server compiles into a grammar, hashed: the response format, or the tools when a call is
        required or named (a server that constrains tool calls compiles their schemas). None: nothing
        constrained. Two requests with the same hash use the same compiled grammar on a server that caches it."""
        forced = self.tools and (self.tool_choice == "required" or isinstance(self.tool_choice, dict))
        if self.response_format is None and not forced:
            return None
        key = [self.response_format, list(self.tools) if forced else None, self.tool_choice if forced else None]
        return hashlib.sha256(json.dumps(key, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def read_ask(where: str, obj: dict[str, Any]) -> Ask | None:
    """The ask of one prompt line (``where``: ``file:line``, for errors), None when it has none of :data:`KEYS`;
    UserError for a malformed field."""
    if not any(k in obj for k in KEYS):
        return None
    tools = _tools(where, obj.get("tools"))
    choice = _choice(where, obj.get("tool_choice"), tools)
    rf = _response_format(where, obj.get("response_format"))
    results = _results(where, obj.get("tool_results"), tools)
    ask = Ask(tools, choice, rf, results)
    return None if ask == Ask() else ask  # "tools": null and the like ask for nothing


def _tools(where: str, raw: Any) -> tuple[dict[str, Any], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw:
        raise UserError(f'{where}: "tools" must be a non-empty list of {{"type": "function", "function": ...}}')
    names: set[str] = set()
    for k, tool in enumerate(raw):
        fn = tool.get("function") if isinstance(tool, dict) and tool.get("type", "function") == "function" else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"].strip():
            raise UserError(f'{where}: tools[{k}] must be {{"type": "function", "function": {{"name": ..., '
                            '"parameters": {...}}}}')  # fmt: skip
        if fn["name"] in names:
            raise UserError(f"{where}: tools[{k}]: the name {fn['name']!r} is given twice")
        names.add(fn["name"])
        check_schema(f"{where}: tools[{k}] ({fn['name']}) parameters", fn.get("parameters") or {})
    return tuple(raw)


def _choice(where: str, raw: Any, tools: tuple[dict[str, Any], ...]) -> str | dict[str, Any] | None:
    if raw is None:
        return None
    if not tools:
        raise UserError(f'{where}: "tool_choice" without "tools"')
    if raw in ("auto", "none", "required"):
        return str(raw)
    name = named_tool(raw)
    if not isinstance(name, str) or name not in {t["function"]["name"] for t in tools}:
        raise UserError(f'{where}: "tool_choice" must be "auto", "none", "required" or {{"type": "function", '
                        '"function": {"name": NAME}} naming one of "tools"')  # fmt: skip
    return dict(raw)


def named_tool(choice: Any) -> str | None:
    """The tool a ``tool_choice`` names (``{"type": "function", "function": {"name": ...}}``); None for any other
    value, malformed ones included."""
    fn = choice.get("function") if isinstance(choice, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    return name if isinstance(name, str) else None


def _response_format(where: str, raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind == "json_schema":
        spec = raw.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not isinstance(spec.get("schema"),
                                                                                                  dict):  # fmt: skip
            raise UserError(f'{where}: "response_format" json_schema needs {{"name": ..., "schema": {{...}}}}')
        check_schema(f"{where}: response_format", spec["schema"])
    elif kind == "json_object":
        if "schema" in raw:
            check_schema(f"{where}: response_format", raw["schema"])
    elif kind != "text":
        raise UserError(f'{where}: "response_format" must have "type" "json_schema", "json_object" or "text"')
    return dict(raw)


def _results(where: str, raw: Any, tools: tuple[dict[str, Any], ...]) -> tuple[ToolResult, ...]:
    if raw is None:
        return ()
    if not tools:
        raise UserError(f'{where}: "tool_results" without "tools" (a result answers a tool call)')
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_STEPS:
        raise UserError(f'{where}: "tool_results" must be a list of 1 to {MAX_STEPS} results')
    out = []
    for k, item in enumerate(raw):
        item = {"content": item} if isinstance(item, str) else item
        if not isinstance(item, dict) or "content" not in item:
            raise UserError(f'{where}: tool_results[{k}] must be a string or {{"content": ..., "latency_ms": ...}}')
        content = item["content"]
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        latency = item.get("latency_ms", 0.0)
        if (
            isinstance(latency, bool)
            or not isinstance(latency, (int, float))
            or not (0 <= latency <= limits.MAX_WAIT_S * 1000 and math.isfinite(latency))
        ):
            raise UserError(
                f"{where}: tool_results[{k}].latency_ms must be a number of milliseconds from 0 to "
                f"{limits.MAX_WAIT_S * 1000:,.0f} (a day), not {latency!r}"
            )
        out.append(ToolResult(text, float(latency)))
    return tuple(out)


def validator(schema: dict[str, Any]) -> Any:
    """jsonschema's validator for ``schema`` (the draft its ``$schema`` names; Draft 2020-12 when none)."""
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema)


def check_schema(what: str, schema: Any) -> None:
    """UserError naming ``what`` when ``schema`` is not a JSON schema (an object its draft's metaschema accepts)."""
    import jsonschema

    if not isinstance(schema, dict):
        raise UserError(f"{what}: a JSON schema is an object, not {type(schema).__name__}")
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
    except jsonschema.SchemaError as e:
        raise UserError(f"{what}: not a valid JSON schema: {e.message[:200]}") from None


def check_value(text: str, schema: dict[str, Any] | None) -> str | None:
    """Why ``text`` is not a JSON value matching ``schema`` (None: any JSON), in one line; None when it is."""
    try:
        value = json.loads(text)
    except ValueError as e:  # JSONDecodeError, or a number past Python's digit limit
        return f"not JSON ({getattr(e, 'msg', e)})"
    if schema is None:
        return None
    error = next(iter(validator(schema).iter_errors(value)), None)
    if error is None:
        return None
    at = "/".join(str(p) for p in error.absolute_path)
    return f"{'at /' + at + ': ' if at else ''}{error.message}"[:200]


def check_calls(ask: Ask | None, calls: list[tuple[str, str]]) -> str | None:
    """Why the (name, arguments) of an answer's tool calls are not valid (None: they are): each names an offered
    tool, its arguments JSON that match the tool's parameters schema. The first reason, in one line."""
    for k, (name, arguments) in enumerate(calls):
        schema = ask.tool_schema(name) if ask is not None else None
        if schema is None:
            return f"call {k}: {name!r} is not an offered tool"
        why = check_value(arguments or "{}", schema)  # a call without arguments sends none (OpenAI: "{}")
        if why is not None:
            return f"call {k} ({name}): arguments {why}"
    return None


def record(prompts: Any) -> dict[str, Any]:
    """``config.tools`` of a workload (a :class:`~llmbench.workloads.prompts.PromptSet` whose lines ask for tools or
    a response format), counted over its lines (a task's steps share their line's ask: counted once)."""
    lines: dict[int, Ask] = {}
    for i, ask in enumerate(prompts.asks or ()):
        if ask is not None:
            lines.setdefault(prompts.turns[i][0] if prompts.turns else i, ask)
    asks = list(lines.values())
    return {"prompts_with_tools": sum(bool(a.tools) for a in asks),
            "prompts_with_response_format": sum(a.response_format is not None for a in asks),
            "tool_names": sorted({n for a in asks for n in a.tool_names()}),
            "constraints": len({c for a in asks if (c := a.constraint_sha256()) is not None}),
            "tasks": sum(bool(a.results) for a in asks)}  # fmt: skip


def example_arguments(schema: dict[str, Any]) -> Any:
    """A value that matches ``schema`` (the subset tools use: objects, arrays, enums, scalars), made the same way
    every time: a string is its property's name, a number its minimum or 1; an object has every property. What
    ``llmbench serve --test-tool-calls`` sends as a scripted call's arguments."""
    return _example(schema, "value")


def _example(schema: dict[str, Any], name: str) -> Any:
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type", "object" if "properties" in schema else "string")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if kind == "object":
        return {k: _example(v if isinstance(v, dict) else {}, k) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        item = schema.get("items")
        return [_example(item, name)] * max(1, int(schema.get("minItems", 1))) if isinstance(item, dict) else []
    if kind in ("integer", "number"):
        low = schema.get("minimum", 1)
        return int(low) if kind == "integer" else float(low)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return name
