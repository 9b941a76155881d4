"""One large tool result costs one rewrite of the prompt, not two: while it cannot be
sent whole, the cap a compile chose for it stays on the next calls as long as the
request fits with it, so the bytes sent for it do not change until it folds into a
memory (or fits whole)."""

from __future__ import annotations

import random

from context_manager import (
    ContextManager,
    ExtractiveSummarizer,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.strategies.autobiographical import (
    AutobiographicalConfig,
    AutobiographicalStrategy,
)

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]


def _agent() -> ContextManager:
    config = AutobiographicalConfig.for_window(16_000, compression_model="extractive")
    strategy = AutobiographicalStrategy(config)
    return ContextManager.open(
        path=":memory:", strategy=strategy, summarizer=ExtractiveSummarizer()
    )


def _result(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) + str(rng.randrange(1000)) for _ in range(words))


def _call(cm: ContextManager, i: int, text: str) -> None:
    cm.add_message("Claude", [ToolUseBlock(id=f"t{i}", name="sh", input={"step": i})])
    cm.add_message("sh", [ToolResultBlock(tool_use_id=f"t{i}", content=text)])


def _sent_result(request: object, i: int) -> str | None:
    for message in request.messages:  # type: ignore[attr-defined]
        for block in message.content:
            if isinstance(block, ToolResultBlock) and block.tool_use_id == f"t{i}":
                assert isinstance(block.content, str)
                return block.content
    return None


def test_a_large_result_is_rewritten_once_not_on_the_next_call_too() -> None:
    rng = random.Random(7)
    big = {k for k in range(200) if rng.random() < 0.05}
    rewrites_after_big = []
    with _agent() as cm:
        cm.add_message("User", "Investigate the failing build.")
        previous = None
        for i in range(200):
            words = rng.randint(6_000, 20_000) if i in big else rng.randint(50, 600)
            _call(cm, i, _result(rng, words))
            cm.tick()
            request = cm.compile()
            stats = request.render_stats
            if i - 1 in big and i not in big:
                now = _sent_result(request, i - 1)
                if now is not None and previous is not None and "result capped" in now:
                    # still capped: sent as it was, so the call re-reads little
                    assert now == previous
                    rewrites_after_big.append(stats["kv_cost"] / stats["tokens"])
            previous = _sent_result(request, i) if i in big else None
    assert len(rewrites_after_big) >= 5
    assert max(rewrites_after_big) <= 0.5  # the call after a big result re-reads little


def test_another_window_chooses_the_caps_anew() -> None:
    rng = random.Random(3)
    with _agent() as cm:
        cm.add_message("User", "Read the log.")
        _call(cm, 0, _result(rng, 30_000))
        small = cm.compile(max_tokens=8_000, reserve_for_response=1_000)
        large = cm.compile(max_tokens=16_000, reserve_for_response=1_000)
        assert (
            small.render_stats["capped_results"]["cap_tokens"]
            < (large.render_stats["capped_results"]["cap_tokens"])
        )
        again = cm.compile(max_tokens=16_000, reserve_for_response=1_000)
        assert _sent_result(again, 0) == _sent_result(large, 0)
