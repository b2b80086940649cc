"""llmbench.core.settings: every variable llmbench reads, read at each call, typed, its malformed values one line;
the folders derived from them, and the users of those folders reading them from there; docs/settings.md's table
the model's own."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

import pytest

from llmbench.core.errors import UserError
from llmbench.core.settings import HISTORY_TIMEOUT_DEFAULT_S, Settings, settings, settings_table, with_table

REPO = Path(__file__).resolve().parents[2]
VARIABLES = [str(f.validation_alias) for f in Settings.model_fields.values()]
# the cache root's Linux rule (macOS and Windows have their own folders; test_macos_cache_root)
XDG_SYSTEM = pytest.mark.skipif(sys.platform == "darwin" or os.name == "nt", reason="XDG_CACHE_HOME is not used here")


@pytest.fixture
def env(monkeypatch, tmp_path):
    """None of the variables set (the developer's own would change what is tested); HOME is tmp_path."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return monkeypatch


def test_docs_table_is_the_model_s():
    page = REPO / "docs" / "settings.md"
    text = page.read_text(encoding="utf-8")
    assert with_table(text) == text, (
        "docs/settings.md's table differs from llmbench/core/settings.py's Settings: regenerate it with "
        "`.venv/bin/python -m llmbench.core.settings docs/settings.md`"
    )
    assert all(f"`{name}`" in settings_table() for name in VARIABLES)


def test_every_field_names_its_variable_says_what_it_does_and_accepts():
    for name, field in Settings.model_fields.items():
        assert isinstance(field.validation_alias, str), name
        assert field.description and isinstance(field.json_schema_extra, dict), name
        assert field.json_schema_extra["accepts"], name
        if field.default is None:
            assert field.json_schema_extra["unset"], f"{name}: say what unset means"


@XDG_SYSTEM
def test_defaults(env, tmp_path):
    s = settings()
    assert s.probe is True and s.debug is False and s.history is None
    assert s.history_timeout_s == HISTORY_TIMEOUT_DEFAULT_S == 60.0
    assert s.cache_dir is s.llama_cpp_converter is s.optimum_cli is s.git_commit is s.git_branch is None
    assert s.cache_root == tmp_path / ".cache" / "llmbench" == s.build_cache_root
    assert s.data_root == tmp_path / ".local" / "share" / "llmbench"


@pytest.mark.parametrize(
    ("name", "value", "field", "expected"),
    [
        ("LLMBENCH_PROBE", "off", "probe", False),
        ("LLMBENCH_PROBE", " OFF ", "probe", False),
        ("LLMBENCH_PROBE", "No", "probe", False),
        ("LLMBENCH_PROBE", "0", "probe", False),
        ("LLMBENCH_PROBE", "false", "probe", False),
        ("LLMBENCH_PROBE", "on", "probe", True),
        ("LLMBENCH_PROBE", "banana", "probe", True),  # anything but an "off" spelling is on, as before
        ("LLMBENCH_PROBE", "", "probe", True),
        ("LLMBENCH_DEBUG", "1", "debug", True),
        ("LLMBENCH_DEBUG", "0", "debug", True),  # set and non-empty: on, as before
        ("LLMBENCH_DEBUG", "", "debug", False),
        ("LLMBENCH_HISTORY", "sqlite:///x.db", "history", "sqlite:///x.db"),
        ("LLMBENCH_HISTORY", " ", "history", " "),  # resolve_url: blanks are the default file
        ("LLMBENCH_HISTORY", "", "history", None),  # empty: no history
        ("LLMBENCH_HISTORY_TIMEOUT_S", "0.5", "history_timeout_s", 0.5),
        ("LLMBENCH_HISTORY_TIMEOUT_S", " 1e3 ", "history_timeout_s", 1000.0),
        ("LLMBENCH_HISTORY_TIMEOUT_S", "", "history_timeout_s", 60.0),
        ("LLMBENCH_HISTORY_TIMEOUT_S", "  ", "history_timeout_s", 60.0),
        ("LLMBENCH_CACHE", "/c", "cache_dir", Path("/c")),
        ("LLMBENCH_CACHE", " /c ", "cache_dir", Path("/c")),
        ("LLMBENCH_CACHE", "~/c", "cache_dir", "HOME/c"),
        ("LLMBENCH_CACHE", "  ", "cache_dir", None),
        ("LLMBENCH_LLAMA_CPP_CONVERTER", "~/convert.py", "llama_cpp_converter", "HOME/convert.py"),
        ("LLMBENCH_LLAMA_CPP_CONVERTER", "", "llama_cpp_converter", None),
        ("LLMBENCH_OPTIMUM_CLI", "/v/bin/optimum-cli", "optimum_cli", Path("/v/bin/optimum-cli")),
        ("LLMBENCH_GIT_COMMIT", "abc123", "git_commit", "abc123"),
        ("LLMBENCH_GIT_COMMIT", "", "git_commit", None),
        ("LLMBENCH_GIT_BRANCH", "main", "git_branch", "main"),
        ("LLMBENCH_GIT_BRANCH", "", "git_branch", ""),  # recorded as given beside LLMBENCH_GIT_COMMIT
        ("XDG_CACHE_HOME", "/xc", "xdg_cache_home", Path("/xc")),
        ("XDG_CACHE_HOME", "", "xdg_cache_home", None),
        ("XDG_DATA_HOME", "/xd", "xdg_data_home", Path("/xd")),
        ("LOCALAPPDATA", "/la", "localappdata", Path("/la")),
    ],
)
def test_each_variable_is_read(env, tmp_path, name, value, field, expected):
    env.setenv(name, value)
    if isinstance(expected, str) and expected.startswith("HOME/"):
        expected = tmp_path / expected.removeprefix("HOME/")
    assert getattr(settings(), field) == expected


def test_the_environment_is_read_at_each_call_and_only_by_its_exact_name(env):
    assert settings().probe is True
    env.setenv("LLMBENCH_PROBE", "off")
    assert settings().probe is False
    env.delenv("LLMBENCH_PROBE")
    env.setenv("llmbench_probe", "off")  # a lower-case twin is another variable on POSIX
    assert settings().probe is True


@pytest.mark.parametrize("bad", ["abc", "soon", "0", "-1", "nan", "inf", "-inf", "1e999"])
def test_a_malformed_value_is_one_line_naming_the_variable(env, bad):
    env.setenv("LLMBENCH_HISTORY_TIMEOUT_S", f" {bad} ")
    with pytest.raises(UserError) as e:
        settings()
    assert str(e.value) == f"LLMBENCH_HISTORY_TIMEOUT_S={bad}: expected a number of seconds above 0"


@XDG_SYSTEM
def test_xdg_roots(env, tmp_path):
    env.setenv("XDG_CACHE_HOME", str(tmp_path / "xc"))
    env.setenv("XDG_DATA_HOME", str(tmp_path / "xd"))
    s = settings()
    assert s.cache_root == tmp_path / "xc" / "llmbench" == s.build_cache_root
    assert s.data_root == tmp_path / "xd" / "llmbench"
    env.setenv("LLMBENCH_CACHE", str(tmp_path / "own"))
    assert settings().build_cache_root == tmp_path / "own" and settings().cache_root == tmp_path / "xc" / "llmbench"


@pytest.mark.skipif(os.name == "nt", reason="POSIX paths")
def test_macos_cache_root(env, monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "platform", "darwin")
    env.setenv("XDG_CACHE_HOME", str(tmp_path / "xc"))  # not macOS's rule
    env.setenv("XDG_DATA_HOME", str(tmp_path / "xd"))  # the data root's rule is every system's
    s = settings()
    assert s.cache_root == tmp_path / "Library" / "Caches" / "llmbench"
    assert s.data_root == tmp_path / "xd" / "llmbench"


@XDG_SYSTEM
def test_the_folders_users_take_them_from_the_settings(env, tmp_path):
    from llmbench.drivers import checkout
    from llmbench.engines import convert
    from llmbench.engines.hf import autodtype, weights_cache
    from llmbench.history.db import default_url, resolve_url

    env.setenv("XDG_CACHE_HOME", str(tmp_path / "xc"))
    env.setenv("XDG_DATA_HOME", str(tmp_path / "xd"))
    assert autodtype.cache_path() == tmp_path / "xc" / "llmbench" / "dtype-auto.json"
    assert convert.cache_root() == tmp_path / "xc" / "llmbench" / "engines"
    assert convert.tools_root() == tmp_path / "xd" / "llmbench" / "tools"
    assert default_url() == f"sqlite:///{tmp_path / 'xd' / 'llmbench' / 'history.db'}"
    assert weights_cache.cache_root() == tmp_path / "xc" / "llmbench"
    assert checkout.venv_root() == tmp_path / "xc" / "llmbench" / "venvs"
    env.setenv("LLMBENCH_CACHE", "~/own")  # expanded for bisect's venvs too, as for the weights cache
    assert weights_cache.cache_root() == tmp_path / "own"
    assert checkout.venv_root() == tmp_path / "own" / "venvs"
    assert resolve_url(None) is None
    env.setenv("LLMBENCH_HISTORY", "  ")
    assert resolve_url(None) == default_url()


def test_a_named_tool_that_is_no_file_is_one_line(env, tmp_path):
    from llmbench.engines import convert

    env.setenv("LLMBENCH_OPTIMUM_CLI", str(tmp_path / "nowhere"))
    with pytest.raises(UserError, match=r"^LLMBENCH_OPTIMUM_CLI=.*nowhere: no such file"):
        convert.optimum_cli()
    tool = tmp_path / "convert_hf_to_gguf.py"
    tool.write_text("", encoding="utf-8")
    env.setenv("LLMBENCH_LLAMA_CPP_CONVERTER", str(tool))
    assert convert.llama_cpp_converter() == tool


def test_git_overrides(env):
    from llmbench.machine.envinfo import git_info

    env.setenv("LLMBENCH_GIT_COMMIT", "c0ffee")
    env.setenv("LLMBENCH_GIT_BRANCH", "release")
    assert git_info() == {"commit": "c0ffee", "branch": "release", "dirty": None}


def test_an_internal_error_is_said_even_when_a_variable_is_malformed(env, monkeypatch, capsys):
    """The CLI's last resort reads LLMBENCH_DEBUG: another variable's mistake must not replace the error."""
    import llmbench.cli as cli

    def boom(**kw):
        raise RuntimeError("boom")

    monkeypatch.setattr(cli, "build", lambda names=None: boom)
    env.setenv("LLMBENCH_HISTORY_TIMEOUT_S", "soon")
    assert cli._run(["compare"]) == 1
    assert "internal error: RuntimeError: boom (set LLMBENCH_DEBUG=1" in capsys.readouterr().err
    env.delenv("LLMBENCH_HISTORY_TIMEOUT_S")
    env.setenv("LLMBENCH_DEBUG", "1")
    assert cli._run(["compare"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_settings_is_imported_only_where_it_is_read():
    """pydantic-settings costs ~0.1 s to import: llmbench.core.settings is imported inside the functions that read
    a setting, never at a module's top, so `import llmbench`, --help and compare never pay for it."""
    top = []
    for path in (REPO / "llmbench").rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{a.name}" for a in node.names] + [node.module or ""]
            if any(n == "llmbench.core.settings" or n.startswith("llmbench.core.settings.") for n in names):
                top.append(str(path.relative_to(REPO)))
    assert not top, f"import llmbench.core.settings inside the function that reads it: {top}"
