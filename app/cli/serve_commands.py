"""`serve` and `mcp`: the local OpenAI- and Anthropic-compatible server without the window, and MCP servers'
tools. No Qt."""

from __future__ import annotations

import argparse
import os
import sys

from app.base.settings import BY_KEY
from app.cli.common import Commands

CACHE_DISK_GB = int(BY_KEY["cache.disk_gb"].default)  # the window's default


def register_serve(sub: Commands) -> None:
    serve = sub.add_parser("serve", help="the OpenAI- and Anthropic-compatible server for MODEL, without the window",
                           description="Plans and loads MODEL as the window does, prints 'listening on URL' when "
                                       "ready, and serves until Ctrl-C or SIGTERM: OpenAI chat completions "
                                       "(POST /v1/chat/completions), OpenAI Responses (POST /v1/responses, GET "
                                       "/v1/responses/ID), Anthropic Messages (POST /v1/messages and "
                                       "/v1/messages/count_tokens), the model (GET /v1/models, /v1/models/ID), "
                                       "GET /health and GET /metrics (Prometheus; these two without the key). "
                                       "Exit codes: 0 stopped, 1 the model does not fit or load or the "
                                       "port is taken, 2 bad input (a port outside 0-65535, a host other than "
                                       "loopback without an API key unless --insecure-no-key, ...).")
    serve.add_argument("model", help="a GGUF file")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1); another than loopback needs an API key")
    serve.add_argument("--port", type=int, default=8080,
                       help="port, 1 to 65535 (default 8080; a taken port: the next free one; 0: any free one)")
    serve.add_argument("--ctx", type=int, help="the context in tokens, one KV pool the slots share (default: as "
                                              "planned for this machine)")
    serve.add_argument("--parallel", default="auto", metavar="N",
                       help="requests written at once, in slots that share the context: auto (default: 4 where the "
                            "plan's memory allows without costing context, KV precision or experts on the GPU, "
                            "fewer otherwise; the load line says how many and why) or 1 to 64")
    serve.add_argument("--cache-ram", type=int, metavar="MB",
                       help="the prompt cache's RAM tier in MB (default: a quarter of the RAM the model leaves free, "
                            "at most 4096; 0: none)")
    serve.add_argument("--cache-disk", type=int, metavar="GB", default=CACHE_DISK_GB,
                       help=f"the prompt cache's disk tier in GB, in the data folder (default {CACHE_DISK_GB}, at "
                            "most a quarter of the free space; 0: none)")
    serve.add_argument("--speculative", default="auto", help="auto (default), mtp, ngram or off")
    serve.add_argument("--reproducible", action=argparse.BooleanOptionalAction, default=False,
                       help="reproducible replies (the window's setting): a reply at temperature 0 is the same "
                            "whatever other requests run beside it or ran before; each slot its own --ctx of KV "
                            "(the plan counts it), no speculative decoding. Default: off")
    serve.add_argument("--chat-template", default="", metavar="NAME",
                       help="one of llama.cpp's built-in chat templates (chatml, llama3, gemma, mistral-v7, ...) "
                            "instead of the file's own; a file without one gets its architecture's")
    serve.add_argument("--api-key", help="clients must send it as a Bearer token or in x-api-key (default: "
                                         "$CLOVER_API_KEY, else none)")
    serve.add_argument("--insecure-no-key", action="store_true",
                       help="serve on a --host other than loopback without an API key (a warning says so)")
    serve.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    """The local OpenAI- and Anthropic-compatible server without the window, until Ctrl-C or SIGTERM."""
    from app.serve.headless import serve_model

    return serve_model(args.model, host=args.host, port=args.port, ctx=args.ctx, parallel=args.parallel,
                       speculative=args.speculative, api_key=args.api_key or os.environ.get("CLOVER_API_KEY"),
                       insecure_no_key=args.insecure_no_key, say=lambda line: print(line, flush=True),
                       cache_ram_mb=args.cache_ram, cache_disk_gb=args.cache_disk, chat_template=args.chat_template,
                       reproducible=args.reproducible)


def register_mcp(sub: Commands) -> None:
    from app.chat.mcp_commands import EXIT_CODES, add_arguments

    mcp = sub.add_parser("mcp", help="MCP servers of mcp.json: list their tools, call one",
                         description=f"Servers from mcp.json in the config folder (or --config FILE). {EXIT_CODES}")
    add_arguments(mcp)
    mcp.set_defaults(func=run_mcp)


def run_mcp(args: argparse.Namespace) -> int:
    from app.chat.mcp_commands import run

    return run(args, sys.stdout, sys.stderr)
