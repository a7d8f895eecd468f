"""TRL's GRPOTrainer trains for two steps on the CPU against an ecotone server (argv[1]),
through `ecotone.trl.environment_factory`. Runs in the TRL venv (.venv-trl); prints a JSON
report for tests/test_trl.py.

Nothing is downloaded: the tokenizer is byte-level (one token per byte, so every text
round-trips, which TRL's tool-call parser needs) and carries TRL's own Qwen2.5 chat template
(TRL accepts only templates it ships); the model is a real, tiny, trainable Qwen2 whose
sampling, during `generate()` only, is forced onto a fixed script of tool calls, so the
episode really runs: a word not in the list (the env's refusal reaches the model), a wrong
guess, the right one. Training forwards see the plain network.
"""

from __future__ import annotations

import os

for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(name, "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import warnings  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: E402
from transformers import (  # noqa: E402
    AddedToken,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)
from transformers.utils import get_json_schema  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from trl.chat_template_utils import qwen2_5_chat_template  # noqa: E402

import ecotone.trl  # noqa: E402

warnings.filterwarnings("ignore", category=FutureWarning)


def call(word: str) -> str:
    arguments = json.dumps({"name": "guess", "arguments": {"guess": word}})
    return f"<tool_call>\n{arguments}\n</tool_call><|im_end|>"


SCRIPT = [call("zzzzz"), call("slate"), call("crane"), "Solved: crane.<|im_end|>"]
FAILURES, CALLS = "tools/failure_frequency", "tools/call_frequency"
"""One assistant turn each; turn i is chosen by the number of tool responses so far."""


def build_tokenizer() -> PreTrainedTokenizerFast:
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        padding_side="left",
        truncation_side="left",
    )
    markers = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in markers])
    tokenizer.chat_template = qwen2_5_chat_template
    return tokenizer


class ScriptedQwen2(Qwen2ForCausalLM):
    def configure_script(self, tokenizer: PreTrainedTokenizerFast, script: list[str]) -> None:
        def encode(text: str) -> list[int]:
            return list(tokenizer(text, add_special_tokens=False)["input_ids"])

        self._turns = [encode(text) for text in script]
        self._header = encode("assistant\n")
        self._im_start = tokenizer.convert_tokens_to_ids("<|im_start|>")
        self._tool_response = tokenizer.convert_tokens_to_ids("<tool_response>")
        self._eos = tokenizer.eos_token_id

    def _next(self, context: list[int]) -> int:
        turn = context.count(self._tool_response)
        start = len(context) - 1 - context[::-1].index(self._im_start)
        step = len(context) - (start + 1 + len(self._header))
        script = self._turns[min(turn, len(self._turns) - 1)]
        return script[step] if 0 <= step < len(script) else self._eos

    def prepare_inputs_for_generation(self, input_ids: Any, **kwargs: Any) -> Any:
        inputs = super().prepare_inputs_for_generation(input_ids, **kwargs)
        inputs["script_context"] = input_ids
        return inputs

    def forward(
        self,
        input_ids: Any = None,
        attention_mask: Any = None,
        script_context: Any = None,
        **kwargs: Any,
    ) -> Any:
        output = super().forward(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        if script_context is not None:
            forced = torch.full_like(output.logits[:, -1, :], -1e9)
            for row, context in enumerate(script_context.tolist()):
                forced[row, self._next(context)] = 0.0
            output.logits[:, -1, :] = forced
        return output


def build_model(tokenizer: PreTrainedTokenizerFast) -> ScriptedQwen2:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=8192,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=False,
    )
    model = ScriptedQwen2(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.configure_script(tokenizer, SCRIPT)
    return model


def main(url: str) -> dict[str, Any]:
    torch.set_num_threads(2)
    factory = ecotone.trl.environment_factory(url)
    members = vars(factory)
    public = sorted(n for n in members if not n.startswith("_") and callable(members[n]))
    tokenizer = build_tokenizer()
    dataset = Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": "Play wordle: "}]] * 2,
            "task": ["crane", "crane"],  # the dataset names the task; the env plays it
        }
    )
    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(
            output_dir=out,
            max_steps=2,
            per_device_train_batch_size=4,
            num_generations=2,
            max_completion_length=3072,
            max_tool_calling_iterations=5,
            learning_rate=1e-3,
            use_cpu=True,
            bf16=False,
            gradient_checkpointing=False,
            logging_steps=1,
            report_to="none",
            save_strategy="no",
            disable_tqdm=True,
            seed=0,
        )
        trainer = GRPOTrainer(
            model=build_model(tokenizer),
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            environment_factory=factory,
        )
        trainer.train()
    log = trainer.state.log_history
    reward_key = f"rewards/{factory.__name__}/mean"
    return {
        "public": public,
        "tools": [t.__name__ for t in trainer.tools],
        "tool_schema": get_json_schema(members["guess"]),
        "global_step": trainer.state.global_step,
        "rewards": [x[reward_key] for x in log if reward_key in x],
        "tool_failures": [x[FAILURES] for x in log if FAILURES in x],
        "tool_calls": [x[CALLS] for x in log if CALLS in x],
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
