import pytest
from hypothesis import given
from hypothesis import strategies as st

from mountwarden.core.options.normalize import (
    effective_value,
    kernel_io_size,
    layer,
    normalize,
    with_kernel_defaults,
)
from mountwarden.core.options.table import OPTIONS, SPELLINGS


def canonical(text):
    result = normalize(text)
    assert result.valid, result.errors
    return result.canonical


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("nfsvers=4.1", "vers=4.1"),
        ("v4.1", "vers=4.1"),
        ("v3", "vers=3"),
        ("vers=4,minorversion=1", "vers=4.1"),
        ("minorversion=2,vers=4", "vers=4.2"),
        ("vers=4", "vers=4"),
        ("lookupcache=pos", "lookupcache=positive"),
        ("lookupcache=positive", "lookupcache=positive"),
        ("actimeo=30", "acregmin=30,acregmax=30,acdirmin=30,acdirmax=30"),
        ("noac", "acregmin=0,acregmax=0,acdirmin=0,acdirmax=0,sync"),
        ("tcp", "proto=tcp"),
        ("rdma", "proto=rdma"),
        ("nocto,ro", "ro,nocto"),
        ("rw", "rw"),
        ("async", "async"),
        ("noresvport,hard,vers=4.1", "vers=4.1,hard,noresvport"),
        ("actimeo=600,acregmax=3", "acregmin=600,acregmax=3,acdirmin=600,acdirmax=600"),
        ("soft", "soft"),
        ("fsc=cachetag", "fsc=cachetag"),
        ('context="a,b"', 'context="a,b"'),
        ("tls,iam,accesspoint=fsap-0123456789abcdef0", "tls,iam,accesspoint=fsap-0123456789abcdef0"),
        ("sec=krb5p:krb5i", "sec=krb5p:krb5i"),
    ],
)
def test_canonical_form(given, expected):
    assert canonical(given) == expected


def test_canonical_order_is_stable_whatever_the_input_order():
    assert canonical("lookupcache=none,actimeo=0,wsize=1048576,vers=4.1,hard") == canonical(
        "hard,vers=4.1,wsize=1048576,actimeo=0,lookupcache=none"
    )


def test_values_are_typed():
    options = normalize("timeo=600,vers=4.1,hard,nocto").options
    assert options == {"vers": "4.1", "hard": True, "timeo": 600, "cto": False}


def errors_of(text):
    return [problem.message for problem in normalize(text).errors]


def test_unknown_option_suggests_the_near_name():
    (message,) = errors_of("nconect=4")
    assert "unknown option 'nconect'" in message and "Did you mean 'nconnect'?" in message


def test_unknown_option_without_near_name():
    (message,) = errors_of("frobnicate")
    assert "unknown option 'frobnicate'" in message and "Did you mean" not in message


@pytest.mark.parametrize(
    ("given", "fragment"),
    [
        ("lookupcache=sometimes", "lookupcache must be all|none|pos|positive"),
        ("nconnect=17", "nconnect must be between 1 and 16"),
        ("nconnect=0", "nconnect must be between 1 and 16"),
        ("vers=5", "vers must be 2|3|4|4.0|4.1|4.2"),
        ("nfsvers=4.3", "vers must be 2|3|4|4.0|4.1|4.2"),
        ("write=soon", "write must be lazy|eager|wait"),
        ("local_lock=some", "local_lock must be none|flock|posix|all"),
        ("timeo=abc", "timeo takes a whole number"),
        ("timeo", "'timeo' needs a value, for example timeo=600"),
        ("hard=1", "'hard' takes no value"),
        ("sec=kerberos", "unknown flavours kerberos"),
        ("accesspoint=ap-1", "is not an access point ID"),
        ("port=70000", "port must be between 0 and 65535"),
        ('_netdev,addr="', "unbalanced double quote"),
        ("hard,=1", "has no option name before '='"),
    ],
)
def test_bad_values_name_the_option_and_the_fix(given, fragment):
    assert any(fragment in message for message in errors_of(given)), errors_of(given)


@pytest.mark.parametrize(
    ("given", "fragment"),
    [
        ("hard,soft", "'hard' and 'soft' contradict each other"),
        ("softerr,hard", "'softerr' and 'hard' contradict each other"),
        ("noac,actimeo=3", "'noac' contradicts 'actimeo=3'"),
        ("acregmax=60,noac", "'noac' contradicts 'acregmax=60'"),
        ("ac,noac", "'ac' and 'noac' contradict each other"),
        ("tcp,udp", "'tcp' and 'udp' contradict each other"),
        ("vers=3,vers=4.1", "'vers=3' and 'vers=4.1' contradict each other"),
        ("nfsvers=3,v4.1", "'nfsvers=3' and 'v4.1' contradict each other"),
        ("lock,nolock", "'lock' and 'nolock' contradict each other"),
        ("ro,rw", "'ro' and 'rw' contradict each other"),
        ("vers=3,minorversion=1", "'minorversion=1' contradicts 'vers=3'"),
        ("vers=4.1,proto=udp", "NFSv4 does not run over UDP"),
        ("iam", "'iam' requires 'tls'"),
        ("tls,notls", "'tls' and 'notls' contradict each other"),
    ],
)
def test_contradictions_are_errors(given, fragment):
    assert any(fragment in message for message in errors_of(given)), errors_of(given)


def test_noac_with_zero_times_is_consistent():
    assert normalize("noac,actimeo=0").valid


@pytest.mark.parametrize(
    ("given", "fragment"),
    [
        # What the kernel does with each was measured in the lab: tests/kernel/test_io_sizes.py.
        ("rsize=1000000", "rsize=1000000 is not a multiple of the page size (4096): the kernel uses rsize=999424"),
        ("wsize=4194304", "above the client's maximum: the kernel uses wsize=1048576"),
        ("rsize=512", "below the client's minimum (1024), so its default applies: the kernel uses rsize=4096"),
        ("wsize=4095", "below a page and not a power of two: the kernel uses wsize=2048"),
        ("intr", "ignored by the kernel since 2.6.25"),
        ("soft", "prefer hard"),
        ("sloppy", "typos pass silently"),
        ("acregmax=3,actimeo=600", "'acregmax=3' is overridden by the later 'actimeo=600'"),
    ],
)
def test_adjusted_or_risky_values_are_warnings(given, fragment):
    result = normalize(given)
    assert result.valid
    assert any(fragment in problem.message for problem in result.warnings), result.warnings


def test_sizes_the_kernel_keeps_are_quiet():
    # 516096 (504 KiB, the chunk size of a client benchmark on EFS) is a whole number of pages: kept.
    assert normalize("rsize=1048576,wsize=65536").warnings == ()
    assert normalize("rsize=516096,wsize=516096").warnings == ()


@pytest.mark.parametrize(
    ("asked", "server_max", "used"),
    [(516096, None, 516096), (1000, None, 4096), (512, None, 4096), (1048577, None, 1048576),
     (2097152, None, 1048576), (4095, None, 2048), (65536, None, 65536), (1048576, 131072, 131072),
     (1048576, 1000000, 999424)],
)
def test_kernel_io_size_predicts_what_the_lab_measured(asked, server_max, used):
    assert kernel_io_size(asked, server_max) == used


def test_observed_options_are_never_errors():
    observed = normalize(
        "rw,vers=4,minorversion=0,namlen=255,clientaddr=10.0.0.2,seclabel,newkernelopt=3", observed=True
    )
    assert observed.valid
    assert observed.options["vers"] == "4.0"
    assert observed.options["newkernelopt"] == "3"


def test_mountstats_opts_line_normalizes():
    line = (
        "rw,vers=4.1,rsize=1048576,wsize=1048576,namlen=255,acregmin=3,acregmax=60,acdirmin=30,acdirmax=60,"
        "hard,proto=tcp,port=0,timeo=600,retrans=2,sec=sys,clientaddr=124.10.30.234,local_lock=none"
    )
    options = normalize(line, observed=True).options
    assert options["vers"] == "4.1" and options["acregmax"] == 60 and options["hard"] is True
    assert options["ro"] is False and options["proto"] == "tcp"


def test_layer_lets_later_exclusive_flags_win():
    assert layer({"hard": True, "timeo": 600}, {"soft": True}) == {"soft": True, "timeo": 600}


def test_effective_value_uses_kernel_defaults():
    assert effective_value({}, "acregmax") == 60
    assert effective_value({}, "lookupcache") == "all"
    assert effective_value({}, "hard") is True
    assert effective_value({"soft": True}, "hard") is False
    assert effective_value({"proto": "udp"}, "timeo") == 11
    assert effective_value({}, "cto") is True


def test_with_kernel_defaults_fills_what_mountstats_would_show():
    filled = with_kernel_defaults({"vers": "4.1", "soft": True})
    assert filled["acregmin"] == 3 and filled["acdirmin"] == 30 and filled["timeo"] == 600
    assert "hard" not in filled and filled["soft"] is True


def test_every_table_entry_has_meaning_and_is_spellable():
    assert len(OPTIONS) > 50
    for spec in OPTIONS:
        assert spec.meaning.endswith("."), spec.name
        assert SPELLINGS[spec.name] is spec


option_names = st.sampled_from(sorted(SPELLINGS))
values = st.one_of(st.none(), st.text(max_size=12), st.integers(0, 2**33).map(str))


@given(st.lists(st.tuples(option_names, values), max_size=12))
def test_known_names_with_arbitrary_values_never_crash(pairs):
    text = ",".join(name if value is None else f"{name}={value}" for name, value in pairs)
    result = normalize(text)
    for problem in result.errors:
        assert problem.option and problem.message


@given(st.text())
def test_arbitrary_text_never_crashes(text):
    normalize(text)
    normalize(text, observed=True)


@given(st.lists(st.tuples(option_names, values), max_size=8))
def test_canonical_form_is_a_fixed_point(pairs):
    text = ",".join(name if value is None else f"{name}={value}" for name, value in pairs)
    first = normalize(text)
    if first.valid:
        second = normalize(first.canonical)
        assert second.options == first.options
