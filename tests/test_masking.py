"""The by-value masker (runner side) and the pattern net (``ledger.redaction``): forms,
streams split across writes, user text left alone, and linear cost on adversarial input."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from urllib.parse import quote, quote_plus

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import redaction
from ledger.redaction import redact, redact_text
from runner_assembly.runner.masking import MASK, LineMasker, Masker

VALUE = "P@ss#w/rd!%:canary-4c3e"


def forms(value: str) -> list[str]:
    raw = value.encode()
    shifted = [encode(b"xyz"[:shift] + raw + b"tail").decode()
               for shift in range(3) for encode in (base64.b64encode, base64.urlsafe_b64encode)]
    return [value, json.dumps(value)[1:-1], quote(value, safe=""), quote(value),
            quote_plus(value), *shifted]


def test_every_form_is_masked() -> None:
    masker = Masker()
    masker.add(VALUE)
    for form in forms(VALUE):
        masked = masker.mask_text(f"before {form} after")
        assert masked.startswith("before ") and MASK in masked, form
        assert VALUE not in masked and form not in masked


def test_short_values_are_not_masked() -> None:
    masker = Masker()
    masker.add("true")
    masker.add("12345")
    assert masker.mask_text("true 12345") == "true 12345"


def test_structured_file_registers_content_lines_and_strings() -> None:
    masker = Masker()
    masker.add_file('{"token": "json-secret-1", "nested": {"k": ["list-secret-2"]}}\n')
    masker.add_file('password = "toml-secret-3"\nuser = "someone"\n')
    text = masker.mask_text("json-secret-1 list-secret-2 toml-secret-3 someone")
    assert text == f"{MASK} {MASK} {MASK} {MASK}"
    assert masker.mask_text('password = "toml-secret-3"') == MASK


def test_value_split_across_writes_and_long_lines() -> None:
    masker = Masker()
    masker.add(VALUE)
    out: list[bytes] = []
    stream = LineMasker(masker, out.append, max_carry=16)
    stream.feed(b"x" * 40 + VALUE[:5].encode())
    stream.feed(VALUE[5:].encode() + b" " + b"y" * 40 + VALUE[:3].encode())
    stream.feed(VALUE[3:].encode() + b"\nlast")
    stream.close()
    joined = b"".join(out)
    assert VALUE.encode() not in joined
    assert joined == b"x" * 40 + MASK.encode() + b" " + b"y" * 40 + MASK.encode() + b"\nlast"


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=6, max_size=40).filter(lambda v: len(v.strip()) >= 6
                                               and len(v.splitlines()) == 1),
       st.lists(st.integers(min_value=0, max_value=200), max_size=4))
def test_no_form_survives_any_chunking(value: str, cuts: list[int]) -> None:
    masker = Masker()
    masker.add(value)
    data = ("log " + "\n".join(f"{form} x" for form in forms(value.strip())) + "\n").encode()
    out: list[bytes] = []
    stream = LineMasker(masker, out.append, max_carry=32)
    start = 0
    for cut in sorted(c % (len(data) + 1) for c in cuts):
        stream.feed(data[start:cut])
        start = max(start, cut)
    stream.feed(data[start:])
    stream.close()
    # The marker itself may hold the value (a secret "[maske"): look beside the markers only.
    beside = b"".join(out).replace(MASK.encode(), b"\x00")
    assert value.strip().encode() not in beside


def test_pattern_net_cuts_credentials() -> None:
    cases = {
        "GIT_HOST_TOKEN=abc123def": "GIT_HOST_TOKEN=[redacted]",
        "DB_PASSWORD=hunter22": "DB_PASSWORD=[redacted]",
        "GH_TOKEN=xyz987654 next": "GH_TOKEN=[redacted] next",
        'x {"token": "v4lue-secret"} y': 'x {"token": "[redacted]"} y',
        '{"api_key": "a\\"b", "secret": "s"}': '{"api_key": "[redacted]", "secret": "[redacted]"}',
        "clone https://bot:p@ss@host/x.git": "clone https://[redacted]@host/x.git",
        "Authorization: Bearer eyJabc.def123": "Authorization: Bearer [redacted]",
        "use ghp_" + "a" * 36: "use [redacted]",
        "AKIAABCDEFGHIJKLMNOP": "[redacted]",
        "ASIAABCDEFGHIJKLMNOP temporary": "[redacted] temporary",
        "key=AIza" + "b" * 35: "key=[redacted]",
        "stripe sk_live_" + "c" * 24: "stripe [redacted]",
        "//registry/:_authToken npm_" + "d" * 36: "//registry/:_authToken [redacted]",
        "post to https://hooks.slack.com/services/T1/B2/" + "e" * 24 + " now":
            "post to https://[redacted] now",
        "-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----\nok": "[redacted]\nok",
    }
    for text, expected in cases.items():
        assert redact_text(text) == expected, text
    assert redact({"password": "x", "name": "GH_TOKEN=abcdef1"}) == {
        "password": "[redacted]", "name": "GH_TOKEN=[redacted]"}


def test_pattern_net_leaves_user_text_alone() -> None:
    for text in ("Fix TestHttpClientRetriesOnTimeoutWith503Status in client_test.go",
                 "src/main/java/com/example/service/OrderProcessingService2.java",
                 "commit 3f2a9c1e0b5d7a8c9e1f3a5b7c9d1e3f5a7b9c1d", "basic functionality",
                 "max_tokens=4096", "id 01J8Z3Q4XKSV1W2M3N4P5Q6R7S", "http://host:8080/a@b"):
        assert redact_text(text) == text


def every_pass(text: str) -> str:
    """The pattern net without its one-search shortcut: each pass in turn."""
    data = text.encode(errors="surrogatepass")
    for pattern, replace in redaction._PASSES:
        data = pattern.sub(replace, data)
    return data.decode(errors="surrogatepass")


def joined_agrees(text: str) -> bool:
    """The joined search finds something exactly when one of the passes would."""
    data = text.encode(errors="surrogatepass")
    return (redaction._ANY_PASS.search(data) is not None) == any(
        pattern.search(data) is not None for pattern, _ in redaction._PASSES)


ONE_OF_EACH = [
    "-----BEGIN EC PRIVATE KEY-----", "git https://bot:p@host/x", "https://" + "u" * 16 + "@h",
    "DB_PASSWORD=x1", "MY-KEY: v", 'x \\"secret\\": \\"v\\"', "api-key='v'",
    "Bearer abcdefgh1", "token abcdefgh1", "ghp_" + "a" * 20, "github_pat_" + "a" * 20,
    "glpat-" + "a" * 20, "xoxb-" + "1" * 10, "xapp-1-" + "a" * 10,
    "hooks.slack.com/workflows/" + "a" * 16, "sk-" + "a" * 16, "AKIA" + "A" * 16,
    "ASIA" + "A" * 16, "AIza" + "b" * 35, "sk_live_" + "c" * 16, "rk_test_" + "c" * 16,
    "npm_" + "d" * 36, "pypi-AgE" + "e" * 50, "svck_" + "f" * 20,
    "eyJ" + "g" * 10 + "." + "h" * 10 + "." + "i" * 10, "\u017fecret=1",
]
"""A text each pass's pattern, and each known token's alternative, finds."""


def test_the_joined_pattern_finds_each_shape_the_passes_find() -> None:
    assert redaction._ANY_PASS.pattern.decode() == redaction.joined(
        pattern for pattern, _ in redaction._PASSES), "built from the passes as they are"
    for text in ONE_OF_EACH:
        assert redaction._ANY_PASS.search(text.encode()) is not None, text
        assert joined_agrees(text) and redact_text(text) == every_pass(text), text


CREDENTIAL_PIECES = ["GH_TOKEN=", "password: ", '"api_key": "', "\\\"", "Bearer ", "basic ",
                     "token ", "https://", "u:p@", "@", "ghp_", "sk-", "AKIA", "ASIA", "eyJ",
                     ".", "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----",
                     "\n", " ", "'", "=", ":", "xox", "-", "_key", "-key", "\u017f", "\u212a",
                     "hooks.slack.com/services/", "hooks.slack.com/workflows/", "AIza", "npm_",
                     "pypi-AgE", "svck_", "github_pat_", "glpat-", "xapp-1-", "sk_live_"]


@settings(max_examples=600, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(CREDENTIAL_PIECES), st.text(max_size=24),
                          st.text(alphabet="abcdefABCDEF0123456789_-", min_size=8,
                                  max_size=60)), max_size=12).map("".join))
def test_the_one_search_shortcut_changes_no_answer(text: str) -> None:
    """The joined search finds something exactly when a pass would, and the net's answer
    is the six passes' answer, whatever the text."""
    assert joined_agrees(text)
    assert redact_text(text) == every_pass(text)


def test_one_mebibyte_of_adversarial_text_is_linear() -> None:
    size = 1 << 20
    masker = Masker()
    masker.add_all([VALUE, "a" * 30 + "b", "SecretCanaryValue-7f3a9c2e1b8d4f6a0c5e"])
    near_misses = " ".join("pypi-AgE" + "x" * 20 + "-pypi-AgE" + "y" * 20
                           for _ in range(size // 59))  # outgrows the joined pattern's DFA
    samples = [near_misses, "a" * size, ("GH_TOKEN=" * (size // 9)),
               ("https://u:" + "@" * 54) * (size // 64),
               ("ghp_" + "A" * 19 + "-") * (size // 24), VALUE[:-1] * (size // len(VALUE)),
               ('"token": "' + "\\" * 54) * (size // 64)]

    def seconds(text: str) -> float:
        started = time.perf_counter()
        redact_text(text)
        masker.mask_text(text)
        return time.perf_counter() - started

    # A quadratic pass over a mebibyte takes minutes; a linear one a fraction of a second,
    # scaled by how busy the machine is now (the plain text's pass, measured in this run).
    bound = max(1.0, 50 * min(seconds(samples[1]) for _ in range(3)))
    for text in samples:
        assert seconds(text) < bound, text[:40]


def test_pod_registers_env_transient_and_volume_secrets(tmp_path: Path) -> None:
    from runner_assembly.contract.plan import EnvEntry, SecretUse
    from runner_assembly.runner.pod import register_pod_secrets

    (tmp_path / "id_ed25519").write_text("-----BEGIN KEY-----\nvolume-secret-line\n")
    entries = [EnvEntry(name="GIT_HOST_TOKEN", source="secret"),
               EnvEntry(name="LAB_API_KEY", source="per-job-secret"),
               EnvEntry(name="EXT_SSH_ENDPOINT", source="per-job-secret"),
               EnvEntry(name="HOME", source="static")]
    uses = [SecretUse(role="tool", name="tool-key", namespace="svc", keys=["id_ed25519"],
                      projection="volume", mount_path=str(tmp_path))]
    env = {"GIT_HOST_TOKEN": "tool-token-value", "LAB_API_KEY": "lab-key-value",
           "EXT_SSH_ENDPOINT": "ssh.example:22", "HOME": "/home/svc"}
    masker = Masker()
    register_pod_secrets(masker, entries, ["LAB_API_KEY"], uses, env)
    text = "tool-token-value lab-key-value volume-secret-line ssh.example:22 /home/svc"
    assert masker.mask_text(text) == f"{MASK} {MASK} {MASK} ssh.example:22 /home/svc"


def test_a_configuration_file_masks_only_its_credential_like_values() -> None:
    masker = Masker()
    masker.add_secret_file("config.toml", '\n'.join([
        'model = "mock-model"', 'model_provider = "mock-provider"',
        '[model_providers.mock-provider]', 'base_url = "http://127.0.0.1:1/v1"',
        'api_key = "canary-api-key-1"', 'proxy = "https://user:canary-pass-2@proxy.example/"',
        '[model_providers.mock-provider.http_headers]', 'X-Custom = "canary-header-3"',
        '[nested]', 'bearer_token = ["canary-token-4"]']))
    masker.add_secret_file("auth.json", '{"OPENAI_API_KEY": "canary-auth-5", "mode": "apikey-x"}')
    text = masker.mask_text("mock-model mock-provider http://127.0.0.1:1/v1 canary-api-key-1 "
                            "canary-pass-2 canary-header-3 canary-token-4 canary-auth-5 apikey-x")
    assert text == f"mock-model mock-provider http://127.0.0.1:1/v1 {' '.join([MASK] * 6)}"
    whole = Masker()
    whole.add_secret_file("config.toml", "not = [json nor toml: mock-model-7")
    assert whole.mask_text("not = [json nor toml: mock-model-7") == MASK, \
        "a file that does not parse is all secret"
    tool = Masker()
    tool.add_secret_file("", 'model = "tool-model-8"')
    assert tool.mask_text("tool-model-8") == MASK, "a credential file is all secret"
