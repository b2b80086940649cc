import json
import re
from pathlib import Path

import pytest

from llmbench.core.errors import UserError
from llmbench.workloads.prompts import load_prompts

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_prompt_file_has_20_chinese_violation_prompts():
    ps = load_prompts(ROOT / "prompts" / "env_violations.txt")
    assert len(ps.prompts) == 20
    assert len(set(ps.prompts)) == 20
    for p in ps.prompts:
        han = re.findall(r"[\u4e00-\u9fff]", p)
        assert 13 <= len(han) <= 24, p


def test_txt_skips_blanks_and_comments_and_strips(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text("# header\n\n  first prompt  \n   # indented comment\nsecond\n\n", encoding="utf-8")
    ps = load_prompts(f)
    assert ps.prompts == ("first prompt", "second")
    assert ps.line_numbers == (3, 5)


def test_bom_and_crlf_give_the_same_prompts(tmp_path):
    plain, odd = tmp_path / "a.txt", tmp_path / "b.txt"
    plain.write_bytes("甲乙丙\nabc\n".encode())
    odd.write_bytes(b"\xef\xbb\xbf" + "甲乙丙\r\nabc\r\n".encode())
    assert load_prompts(plain).prompts == load_prompts(odd).prompts == ("甲乙丙", "abc")
    assert load_prompts(plain).sha256 != load_prompts(odd).sha256  # the hash is of the bytes


def test_jsonl(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text(
        "\n".join([json.dumps({"prompt": "一"}), "# c", "", json.dumps({"prompt": "two", "id": 2})]), encoding="utf-8"
    )
    assert load_prompts(f).prompts == ("一", "two")


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", "no prompts"),
        (b"# only\n\n   \n#x\n", "no prompts"),
        (b"\x00\x01\x02binary", "binary"),
        (b"ok line\n\xff\xfe bad\n", "not UTF-8 .*line 2"),
    ],
)
def test_bad_txt_files(tmp_path, content, match):
    f = tmp_path / "bad.txt"
    f.write_bytes(content)
    with pytest.raises(UserError, match=match):
        load_prompts(f)


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("{not json", r"bad.jsonl:2: not valid JSON"),
        ('{"text": "x"}', '"prompt" field'),
        ('{"prompt": 3}', "must be a string"),
        ('["x"]', '"prompt" field'),
        ('{"prompt": "  "}', "empty prompt"),
        ('{"prompt": "x", "n": ' + "9" * 5000 + "}", r"bad.jsonl:2: not valid JSON \(Exceeds"),  # was: ValueError
    ],
)
def test_bad_jsonl_lines_name_the_line(tmp_path, line, match):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"prompt": "fine"}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(UserError, match=match):
        load_prompts(f)


def test_missing_and_folder(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_prompts(tmp_path / "nope.txt")
    with pytest.raises(UserError, match="folder"):
        load_prompts(tmp_path)


@pytest.mark.parametrize("name", ["data.json", "data.csv", "data.parquet", "data.arrow"])
def test_a_dataset_is_not_read_a_line_a_prompt(tmp_path, name):
    f = tmp_path / name
    f.write_text('[{"conversations": [{"from": "human", "value": "hello"}]}]\n', encoding="utf-8")
    # was: its lines as prompts (a JSON file's brackets, a CSV's header)
    with pytest.raises(UserError, match=r"is a dataset \(\.\w+\), not a prompt list"):
        load_prompts(f)
    assert load_prompts(f, as_lines=True).prompts == (f.read_text(encoding="utf-8").strip(),)  # --prompt-format txt


def test_check_whole_names_the_option_and_the_bound():
    from llmbench.workloads.prompts import check_whole

    assert check_whole("--n", 5) == 5
    with pytest.raises(UserError, match="--n must be at least 1, not 0"):
        check_whole("--n", 0)
    with pytest.raises(UserError, match=r"--n 11: more than llmbench can make or run \(at most 10 turns\)"):
        check_whole("--n", 11, high=10, what=" turns")
