from hypothesis import given
from hypothesis import strategies as st

from mountwarden.core.options.syntax import format_option, parse_option_tokens, split_option_string


def test_quoted_selinux_context_keeps_its_commas():
    text = 'rw,context="system_u:object_r:svirt_sandbox_file_t:s0:c575,c786",relatime'
    assert split_option_string(text) == [
        "rw",
        'context="system_u:object_r:svirt_sandbox_file_t:s0:c575,c786"',
        "relatime",
    ]


def test_mount_options_list_entries_may_hold_commas():
    assert parse_option_tokens(["vers=4.1,hard", "actimeo=0", " lookupcache=pos "]) == [
        ("vers", "4.1"),
        ("hard", None),
        ("actimeo", "0"),
        ("lookupcache", "pos"),
    ]


def test_blanks_after_commas_and_empty_tokens_are_ignored():
    # The telegraf sample really has "acregmax=60, acdirmin=30".
    assert split_option_string("acregmax=60, acdirmin=30,,") == ["acregmax=60", "acdirmin=30"]


def test_value_may_contain_equals_sign():
    assert parse_option_tokens("awscredsuri=/v2/credentials?a=b") == [("awscredsuri", "/v2/credentials?a=b")]


def test_unterminated_quote_runs_to_the_end():
    assert split_option_string('context="a,b') == ['context="a,b']


def test_format_option_quotes_values_with_commas():
    assert format_option("context", "a,b") == 'context="a,b"'
    assert format_option("hard", True) == "hard"
    assert format_option("timeo", 600) == "timeo=600"


def test_none_is_no_options():
    assert parse_option_tokens(None) == []


@given(st.text())
def test_any_text_splits_without_error(text):
    for token in split_option_string(text):
        assert token == token.strip() and token
    parse_option_tokens(text)
