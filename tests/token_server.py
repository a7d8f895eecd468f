"""A model endpoint that speaks vLLM's OpenAI-compatible API with token ids, for the tests and
the benchmark (no model runs here): a toy tokenizer, a chat template, and a deterministic
"model" that answers from a script.

    with TokenServer(Script([call("delta", delta=1)])) as server:
        server.url          # http://127.0.0.1:PORT/v1
        server.requests     # every request, in order: (path, JSON body)

Served, under vLLM's field names:

- `POST /v1/chat/completions`: `messages`, `tools`; with `return_token_ids` the answer has
  `prompt_token_ids` (top level) and the choice's `token_ids`; with `logprobs` the choice's
  `logprobs.content[i]` (`token`, `logprob`, `bytes`, `top_logprobs`); tool calls parsed
  from the model's text (the Hermes form) into `message.tool_calls`.
- `POST /v1/completions`: `prompt` a string or a list of token ids; the choice's `text`,
  and with `return_token_ids` its `prompt_token_ids` and `token_ids`, with `logprobs` (an
  int) its `logprobs` (`tokens`, `token_logprobs`, `top_logprobs`, `text_offset`);
  `max_tokens` 16 unless given, as vLLM's.
- `POST /tokenize` (`prompt`, or `messages` + `tools` + `add_generation_prompt`):
  `count`, `max_model_len`, `tokens`; `POST /detokenize` (`tokens`): `prompt`.

Modes: `vllm` (all of it), `text` (ignores the token fields: answers without ids, as most
OpenAI-compatible servers do), `strict` (answers 400 to a field it does not know, as
OpenAI's API does), `chat-only` (ids on chat, but no `/tokenize` nor `/v1/completions`).

The tokenizer is greedy longest-match over special tokens, a few words and single bytes.
The model writes its answer byte by byte (the markers `<tool_call>`, `</tool_call>` and its
end-of-turn whole), so its ids are not what the tokenizer makes of the same text: a client
that tokenizes the conversation's text again sends other ids than the model wrote.

Run as a program (the benchmark does), it serves the counter script until killed and prints
its URL: `python tests/token_server.py [--port N] [--mode vllm]`.
"""

from __future__ import annotations

import argparse
import http.server
import json
import re
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

SPECIAL = {"<|pad|>": 0, "<|im_start|>": 1, "<|im_end|>": 2}
"""Left out of a text decoded with `skip_special` (as vLLM's `skip_special_tokens`)."""
ADDED = {"<tool_call>": 3, "</tool_call>": 4, "<tool_response>": 5, "</tool_response>": 6}
"""Whole tokens that stay in decoded text."""
BYTES = 16
"""Byte b is token BYTES + b."""
WORDS = (
    "assistant", "user", "system", "tool", "delta", "guess", "count", "crane", "slate",
    '{"name": "', '", "arguments": ', '{"delta": ', '{"guess": "', "\n",
)  # fmt: skip
WORD = {w: 300 + i for i, w in enumerate(WORDS)}
EOS = SPECIAL["<|im_end|>"]
MAX_MODEL_LEN = 4096

_VOCAB = {**SPECIAL, **ADDED, **WORD}
_BY_ID = {i: t for t, i in _VOCAB.items()}
_LONGEST = sorted(_VOCAB, key=len, reverse=True)


class Vocabulary(Protocol):
    """What the server needs of a tokenizer."""

    eos: int

    def encode(self, text: str) -> list[int]: ...
    def written(self, text: str) -> list[int]: ...
    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str: ...
    def render(
        self, messages: list[dict[str, Any]], tools: list[Any] | None, generation: bool
    ) -> str: ...


class ToyVocabulary:
    """The toy tokenizer and its chat template (a ChatML template, Qwen's tool form)."""

    eos = EOS

    def encode(self, text: str) -> list[int]:
        """Greedy longest match: specials, markers and words whole, else single bytes."""
        out: list[int] = []
        i = 0
        while i < len(text):
            for token in _LONGEST:
                if text.startswith(token, i):
                    out.append(_VOCAB[token])
                    i += len(token)
                    break
            else:
                out.extend(BYTES + b for b in text[i].encode())
                i += 1
        return out

    def written(self, text: str) -> list[int]:
        """The ids the model writes `text` in: byte by byte, its markers whole."""
        out: list[int] = []
        for part in re.split(r"(<tool_call>|</tool_call>|<\|im_end\|>)", text):
            if part in _VOCAB:
                out.append(_VOCAB[part])
            else:
                out.extend(BYTES + b for b in part.encode())
        return out

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
        data = bytearray()
        for i in ids:
            if BYTES <= i < BYTES + 256:
                data.append(i - BYTES)
            elif i in _BY_ID and not (skip_special and i in SPECIAL.values()):
                data.extend(_BY_ID[i].encode())
        return data.decode("utf-8", "replace")

    def render(
        self, messages: list[dict[str, Any]], tools: list[Any] | None, generation: bool
    ) -> str:
        out = []
        for m in messages:
            role, content = m.get("role"), m.get("content") or ""
            if role == "system" and tools:
                listed = "\n".join(json.dumps(t.get("function", t), sort_keys=True) for t in tools)
                content = f"{content}\n# Tools\n{listed}"
            if role == "assistant":
                for call in m.get("tool_calls") or []:
                    f = call["function"]
                    args = f.get("arguments") or {}
                    args = json.loads(args) if isinstance(args, str) else args
                    body = json.dumps({"name": f["name"], "arguments": args})
                    content += f"{chr(10) if content else ''}<tool_call>\n{body}\n</tool_call>"
            if role == "tool":
                role, content = "user", f"<tool_response>\n{content}\n</tool_response>"
            out.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
        if generation:
            out.append("<|im_start|>assistant\n")
        return "".join(out)


def call(name: str, **arguments: Any) -> str:
    """A tool call as the model writes it (the Hermes form)."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


class Script:
    """The model: its answer to a prompt is `turns[n]`, n the tool responses in the prompt
    (the last one over and over once they run out), then its end-of-turn token."""

    def __init__(self, turns: Sequence[str], end: str = "<|im_end|>") -> None:
        self.turns = list(turns)
        self.end = end

    def __call__(self, prompt: str) -> str:
        n = prompt.count("<tool_response>")
        return self.turns[min(n, len(self.turns) - 1)] + self.end


def logprob(position: int, token: int) -> float:
    """The model's deterministic log-probability of writing `token` at `position`."""
    return -round(0.001 * (1 + (token * 7 + position) % 50), 6)


_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
FIELDS = {
    "/v1/chat/completions": {
        "model", "messages", "tools", "tool_choice", "temperature", "max_tokens",
        "max_completion_tokens", "logprobs", "top_logprobs", "n", "stream",
    },
    "/v1/completions": {"model", "prompt", "max_tokens", "temperature", "logprobs"},
}  # fmt: skip
"""What the `strict` mode knows (OpenAI's fields); anything else is a 400."""


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # as a real server's backlog: 64 clients connect at once


class TokenServer:
    """The endpoint, served on 127.0.0.1 in a thread while the `with` block runs."""

    def __init__(
        self,
        script: Callable[[str], str],
        mode: str = "vllm",
        vocabulary: Vocabulary | None = None,
        port: int = 0,
    ) -> None:
        if mode not in ("vllm", "text", "strict", "chat-only"):
            raise ValueError(f"unknown mode {mode!r}")
        self.script = script
        self.mode = mode
        self.vocab: Vocabulary = vocabulary or ToyVocabulary()
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.written: list[list[int]] = []
        """Every output, in ids, in the order written."""
        self._lock = threading.Lock()
        self._calls = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                try:
                    size = int(self.headers.get("content-length") or 0)
                    body = json.loads(self.rfile.read(size) or b"{}")
                except (ValueError, json.JSONDecodeError):
                    self._send(400, {"error": {"message": "the body is not JSON"}})
                    return
                status, answer = server.answer(self.path, body)
                self._send(status, answer)

            def _send(self, status: int, answer: Any) -> None:
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._http = _Server(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    def __enter__(self) -> TokenServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()

    def paths(self) -> list[str]:
        with self._lock:
            return [path for path, _ in self.requests]

    # --- the API ------------------------------------------------------------------------

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        with self._lock:
            self.requests.append((path, body))
        if not isinstance(body, dict):
            return 400, {"error": {"message": "the body is not an object"}}
        if self.mode == "strict" and path in FIELDS:
            unknown = sorted(set(body) - FIELDS[path])
            if unknown:
                message = f"Unrecognized request argument supplied: {unknown[0]}"
                return 400, {"error": {"message": message, "type": "invalid_request_error"}}
        routes = {
            "/v1/chat/completions": self._chat,
            "/v1/completions": self._completion,
            "/tokenize": self._tokenize,
            "/detokenize": self._detokenize,
        }
        route = routes.get(path)
        if route is None or (self.mode == "chat-only" and path != "/v1/chat/completions"):
            return 404, {"detail": "Not Found"}
        try:
            return 200, route(body)
        except (KeyError, TypeError, ValueError) as exc:
            return 400, {"error": {"message": f"bad request: {exc!r}"}}

    def _generate(self, prompt: list[int], limit: Any) -> tuple[list[int], str]:
        text = self.script(self.vocab.decode(prompt))
        ids = self.vocab.written(text)
        if ids and ids[-1] != self.vocab.eos and text.endswith("<|im_end|>"):
            ids.append(self.vocab.eos)  # a vocabulary that writes the marker as text
        finish = "stop"
        if isinstance(limit, int) and len(ids) > limit:
            ids, finish = ids[:limit], "length"
        with self._lock:
            self.written.append(ids)
        return ids, finish

    def _wants_tokens(self, body: dict[str, Any]) -> bool:
        return self.mode != "text" and bool(body.get("return_token_ids"))

    def _chat(self, body: dict[str, Any]) -> dict[str, Any]:
        messages, tools = body["messages"], body.get("tools")
        prompt = self.vocab.encode(self.vocab.render(messages, tools, True))
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        output, finish = self._generate(prompt, limit)
        text = self.vocab.decode(output, skip_special=True)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        calls = []
        for match in _HERMES.finditer(text):
            parsed = json.loads(match.group(1))
            with self._lock:
                self._calls += 1
                cid = f"chatcmpl-tool-{self._calls}"
            arguments = json.dumps(parsed.get("arguments", {}))
            function = {"name": parsed["name"], "arguments": arguments}
            calls.append({"id": cid, "type": "function", "function": function})
        if calls:
            message = {"role": "assistant", "content": _HERMES.sub("", text).strip() or None}
            message["tool_calls"] = calls
            finish = "tool_calls" if finish == "stop" else finish
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
        if body.get("logprobs") and self.mode != "text":
            choice["logprobs"] = {
                "content": [
                    {
                        "token": self.vocab.decode([t]),
                        "logprob": logprob(i, t),
                        "bytes": list(self.vocab.decode([t]).encode()),
                        "top_logprobs": [],
                    }
                    for i, t in enumerate(output)
                ]
            }
        else:
            choice["logprobs"] = None
        answer: dict[str, Any] = {
            "id": "chatcmpl-toy",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [choice],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(output)},
        }
        if self._wants_tokens(body):
            answer["prompt_token_ids"] = prompt
            choice["token_ids"] = output
        return answer

    def _completion(self, body: dict[str, Any]) -> dict[str, Any]:
        given = body["prompt"]
        if isinstance(given, str):
            prompt = self.vocab.encode(given)
        elif isinstance(given, list) and all(type(i) is int for i in given):
            prompt = given
        else:
            raise ValueError("prompt is a string or a list of token ids")
        output, finish = self._generate(prompt, body.get("max_tokens") or 16)
        choice: dict[str, Any] = {
            "index": 0,
            "text": self.vocab.decode(output, skip_special=True),
            "finish_reason": finish,
            "logprobs": None,
        }
        if body.get("logprobs") is not None and self.mode != "text":
            tokens = [self.vocab.decode([t]) for t in output]
            offsets, at = [], 0
            for token in tokens:
                offsets.append(at)
                at += len(token)
            choice["logprobs"] = {
                "tokens": tokens,
                "token_logprobs": [logprob(i, t) for i, t in enumerate(output)],
                "top_logprobs": [None] * len(output),
                "text_offset": offsets,
            }
        if self._wants_tokens(body):
            choice["prompt_token_ids"] = prompt
            choice["token_ids"] = output
        return {"id": "cmpl-toy", "object": "text_completion", "choices": [choice]}

    def _tokenize(self, body: dict[str, Any]) -> dict[str, Any]:
        if "messages" in body:
            generation = bool(body.get("add_generation_prompt", True))
            text = self.vocab.render(body["messages"], body.get("tools"), generation)
        else:
            text = body["prompt"]
        tokens = self.vocab.encode(text)
        return {"count": len(tokens), "max_model_len": MAX_MODEL_LEN, "tokens": tokens}

    def _detokenize(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"prompt": self.vocab.decode(body["tokens"])}


COUNTER = Script([call("delta", delta=1)])
"""A model that adds 1 to the counter, turn after turn."""


def main() -> int:
    parser = argparse.ArgumentParser(description="a vLLM-like token endpoint, for tests")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--mode", default="vllm")
    args = parser.parse_args()
    with TokenServer(COUNTER, args.mode, port=args.port) as server:
        print(server.url, flush=True)
        threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
