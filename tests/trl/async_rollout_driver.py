"""TRL's async GRPO rollout worker (`trl.experimental.async_grpo.AsyncRolloutWorker`: a
spawned process running `_AsyncRolloutLoop`) plays an ecotone env (argv[1]) through
`ecotone.trl.environment_factory`, its model a local endpoint that speaks vLLM's
`/v1/completions` with token ids (tests/token_server.py). Runs in the TRL venv (.venv-trl,
with aiohttp); prints a JSON report for tests/test_trl.py.

What cannot run here is left out, and only that: the trainer itself (AsyncGRPOTrainer) needs
a vLLM server it syncs weights into, over NCCL, and the worker's constructor refuses to
start without the `vllm` package installed, though its loop never imports it (it speaks
HTTP). The check is answered yes for this process; the loop, its spawned child, the pickled
environment factory, its tokenization, tool calls, rewards and training rows are TRL's own.

The endpoint's model writes through the same byte-level tokenizer as the GRPO test's
(tests/trl/grpo_driver.py): a guess of `slate`, then `crane`, then a last word.
"""

from __future__ import annotations

import os

for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(name, "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import json  # noqa: E402
import queue  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from typing import Any  # noqa: E402

from accelerate.state import PartialState  # noqa: E402
from datasets import Dataset  # noqa: E402
from grpo_driver import build_tokenizer  # type: ignore[import-not-found]  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402
from trl.experimental.async_grpo import async_rollout_worker  # noqa: E402

import ecotone.trl  # noqa: E402
from tests.token_server import Script, TokenServer, call  # noqa: E402

SAMPLES = 4
"""Two groups of two rollouts."""


class HFVocabulary:
    """tests/token_server.py's tokenizer, as a transformers tokenizer."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast) -> None:
        self.tokenizer = tokenizer
        self.eos = int(tokenizer.eos_token_id)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def written(self, text: str) -> list[int]:
        return self.encode(text)

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=skip_special))

    def render(self, messages: list[dict[str, Any]], tools: Any, generation: bool) -> str:
        return str(
            self.tokenizer.apply_chat_template(
                messages, tools=tools, add_generation_prompt=generation, tokenize=False
            )
        )


def main(url: str) -> dict[str, Any]:
    PartialState()  # as the trainer's process has (TRL's logging needs it)
    tokenizer = build_tokenizer()
    script = Script([call("guess", guess="slate"), call("guess", guess="crane"), "Solved."])
    dataset = Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": "Play wordle: "}]] * 2, "task": ["crane"] * 2}
    )
    factory = ecotone.trl.environment_factory(url)
    with TokenServer(script, vocabulary=HFVocabulary(tokenizer)) as endpoint:
        async_rollout_worker.is_vllm_available = lambda: True  # the one check (see above)
        worker = async_rollout_worker.AsyncRolloutWorker(
            model_name="toy",
            dataset=dataset,
            reward_funcs=[],
            processing_class=tokenizer,
            eos_token_ids=[tokenizer.eos_token_id],
            environment_factory=factory,  # pickled into the spawned child
            num_generations=2,
            max_inflight_tasks=4,
            vllm_server_url=endpoint.url.removesuffix("/v1"),
            max_tokens=256,
            max_tool_calling_iterations=5,
            child_ready_timeout=300,
        )
        worker.start()
        samples: list[Any] = []
        deadline = time.monotonic() + 300
        try:
            while len(samples) < SAMPLES and time.monotonic() < deadline:
                worker.check_health(stale_after_s=120)
                try:
                    samples.append(worker.rollout_buffer.get(timeout=1.0))
                except queue.Empty:
                    continue
        finally:
            worker.stop()
        completions = [body for path, body in endpoint.requests if path == "/v1/completions"]
        return {
            "samples": [
                {
                    "input_ids": s.input_ids.tolist(),
                    "completion_mask": s.completion_mask.tolist(),
                    "old_log_probs": [float(x) for x in s.old_log_probs.tolist()],
                    "advantage": s.advantage,
                    "reward": s.metrics["reward"],
                    "completion": s.completion,
                }
                for s in samples
            ],
            "written": endpoint.written,
            "paths": sorted(set(endpoint.paths())),
            "prompts_are_ids": all(
                isinstance(b["prompt"], list) and all(type(i) is int for i in b["prompt"])
                for b in completions
            ),
            "asked": sorted({(b.get("return_token_ids"), b.get("logprobs")) for b in completions}),
            "decoded": [tokenizer.decode(s.input_ids.tolist()) for s in samples],
        }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
