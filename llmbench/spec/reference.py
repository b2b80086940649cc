"""docs/config.md, generated from the spec's JSON schema (``python -m llmbench.spec > docs/config.md``)."""

from __future__ import annotations

from typing import Any

from llmbench.spec import RunSpec, option_of, rules


def reference() -> str:
    """docs/config.md: every setting of ``llmbench run`` (and :func:`llmbench.measure`), table by table, from the
    spec's JSON schema (``python -m llmbench.spec > docs/config.md`` remakes it; a unit test holds it equal)."""
    schema = RunSpec.model_json_schema()
    lines = [
        "# Settings: the spec, config files and `--print-config`",
        "",
        "Generated from `llmbench.spec` (`python -m llmbench.spec > docs/config.md`); do not edit by hand.",
        "",
        "Every setting of `llmbench run` and `llmbench.measure()` is declared once, in `llmbench/spec/`, with its",
        "type, bounds, default and help; the options, the Python API's keywords, config files and the run JSON's",
        "`config.spec` are all made from it. A config file is TOML, one table per section below:",
        "",
        "```bash",
        "llmbench run prompts.txt --weights random --max-new-tokens 64 --print-config > bench.toml  # commit it",
        "llmbench run --config bench.toml                    # the same settings",
        "llmbench run --config bench.toml --dtype bfloat16   # a flag overrides the file",
        "llmbench run --config-from results/RUN.json         # the settings a run recorded (config.spec)",
        "```",
        "",
        "```python",
        'spec = llmbench.load_spec("bench.toml")',
        "run = llmbench.measure(spec=spec, max_new_tokens=16)  # keywords override the spec, by field name",
        "```",
        "",
        "An unknown table or key, or a value of the wrong type or out of bounds, is one line naming the file, the",
        'key and the type expected (exit 2). Nothing is coerced: `true` is no integer, `"5"` no number, `"yes"` no',
        "boolean (an integer is taken where a number is asked). `[outputs]` is where a result goes, not how it was",
        "measured: it is never recorded or printed. URLs are recorded and printed without credentials or query.",
        "",
        "A relative path in a config file (`prompts`, `trace`, a `model` or `tokenizer` folder beside it) is read from",
        "the file's own folder, so a committed config works from any working folder. `--print-config` and a run's",
        "`config.spec` write local paths absolute (a shipped prompt set by its name), so `--config-from RUN.json`",
        "finds the prompts from anywhere; it refuses, in one line, a prompt file whose sha256 differs from the one the",
        "run recorded, and a run whose prompts were passed in memory (`llmbench.measure([...])`), unless PROMPTS is",
        "given.",
        "",
        "Every plan is bounded before anything loads: prompts x `repeats` x `turns` (and a sweep's setups, a scan's",
        "points, a load test's rates) at most 10,000,000 requests (`MAX_PLANNED`, [limits](limits.md)).",
        "",
        "Settings that go together are checked together by the spec itself (`llmbench.spec.rules`), however it is",
        "made: flags, a config file, `--print-config`, `--config-from`, `llmbench.measure()`, `load_spec()`. A",
        "refused combination is the same one line everywhere (exit 2; `--print-config` prints nothing). An option",
        "counts as given when it differs from its default, so a printed config, which lists every setting, reads",
        "back as it was. The rules (a resolution is recorded as the value used: the run JSON's `config.spec` and",
        '`--print-config` show `cache = "static"` for `--compile`):',
        "",
        *(f"- {line}" for line in rules.described()),
    ]
    for table, section in RunSpec.sections().items():
        sub = schema["$defs"][section.__name__]
        head = "| key | option | type | default | bounds | help |"
        lines += ["", f"## [{table}]", "", section.__doc__ or "", "", head, "|---|---|---|---|---|---|"]
        for name, prop in sub["properties"].items():
            fi = section.model_fields[name]
            flag = (fi.json_schema_extra or {}).get("flag") or option_of(name, fi)  # type: ignore[union-attr]
            lines.append(f"| `{name}` | `{flag}` | {_type_of(prop)} | `{prop.get('default')!r}` | {_range(prop)} | "
                         f"{(prop.get('description') or '').replace('|', '/')} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _type_of(prop: dict[str, Any]) -> str:
    options = prop.get("anyOf", [prop])
    names = []
    for o in options:
        if "enum" in o:
            names.append(" / ".join(f"`{v}`" for v in o["enum"]))
        elif o.get("type"):
            names.append(str(o["type"]))
    return " or ".join(names)


def _range(prop: dict[str, Any]) -> str:
    for o in prop.get("anyOf", [prop]):
        low = o.get("minimum", o.get("exclusiveMinimum"))
        high = o.get("maximum")
        if low is not None or high is not None:
            left = "(" if "exclusiveMinimum" in o else "["
            return f"{left}{low if low is not None else '-inf'}, {high if high is not None else 'inf'}]"
    return ""
