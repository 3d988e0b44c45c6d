"""A minimal agent loop: any OpenAI-compatible chat model calls shoal's tools over HTTP.

The tool schemas come from `GET /v1/tools` (OpenAI function-calling format, passed to the model as they are);
each tool call the model makes is sent to `POST /v1/tools/{name}` and the JSON answer (or the error, so the
model can correct its arguments) goes back as a `tool` message, until the model answers in plain text.

    shoal serve --taxonomy examples/taxonomy/products.yaml &
    python examples/agent_loop.py --llm-url http://127.0.0.1:11434/v1 --llm-model qwen2.5:7b \\
        "Which shop category fits a dreadnought guitar with a solid spruce top?"

Any endpoint that speaks the chat completions API with tools works (OpenAI, vLLM, llama.cpp's server,
Ollama, LM Studio); pass its key with --llm-key or OPENAI_API_KEY.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import httpx

SYSTEM = (
    "You help with a shop's catalogue. Use the tools: classify_taxonomy (taxonomy 'products') to place products,"
    " filter_context to cut long texts down, search to look things up. Answer briefly once you know."
)


def run_agent(
    question: str,
    *,
    llm_url: str,
    llm_model: str,
    shoal_url: str = "http://127.0.0.1:8080",
    llm_key: str | None = None,
    max_turns: int = 6,
) -> tuple[str, list[dict[str, Any]]]:
    """Run the loop; returns the model's final answer and the conversation."""
    from openai import OpenAI

    tools = httpx.get(f"{shoal_url}/v1/tools", timeout=30).json()["tools"]
    llm = OpenAI(base_url=llm_url, api_key=llm_key or os.environ.get("OPENAI_API_KEY") or "none")
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    with httpx.Client(base_url=shoal_url, timeout=300) as shoal:
        for _ in range(max_turns):
            message = llm.chat.completions.create(model=llm_model, messages=messages, tools=tools).choices[0].message
            if not message.tool_calls:
                return message.content or "", messages
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                reply = shoal.post(
                    f"/v1/tools/{call.function.name}",
                    content=call.function.arguments or "{}",
                    headers={"Content-Type": "application/json"},
                )
                messages.append({"role": "tool", "tool_call_id": call.id, "content": reply.text})
    return "(no answer within max_turns)", messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("question")
    parser.add_argument("--llm-url", required=True, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--llm-model", required=True)
    parser.add_argument("--llm-key", default=None)
    parser.add_argument("--shoal-url", default="http://127.0.0.1:8080")
    parser.add_argument("--verbose", action="store_true", help="print the whole conversation")
    args = parser.parse_args()
    answer, messages = run_agent(
        args.question, llm_url=args.llm_url, llm_model=args.llm_model, shoal_url=args.shoal_url, llm_key=args.llm_key
    )
    if args.verbose:
        print(json.dumps(messages, indent=2))
    print(answer)


if __name__ == "__main__":
    main()
