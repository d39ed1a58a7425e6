"""`hub search|files`: GGUF models on the Hugging Face Hub, each file planned for this machine. No Qt."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from app.cli.common import Commands, HubExit, plan_request

if TYPE_CHECKING:
    from app.fetch.catalog import CatalogEntry
    from app.fetch.hub import HubError


def register_hub(sub: Commands) -> None:
    hub = sub.add_parser("hub", help="find GGUF models on the Hugging Face Hub and plan each file before downloading",
                         description="Uses HF_ENDPOINT (default https://huggingface.co) and the token pasted in the "
                                     "app or HF_TOKEN. Exit codes: 0 ok, 1 nothing fits this machine (files --plan), "
                                     "2 bad input (no such repo, gated, ...), 3 the Hub cannot be reached.")
    hub_sub = hub.add_subparsers(dest="hub", metavar="ACTION", required=True)
    hub_search = hub_sub.add_parser("search", help="GGUF model repos matching QUERY, most downloaded first")
    hub_search.add_argument("query")
    hub_search.add_argument("--limit", type=int, default=20)
    hub_search.set_defaults(func=run_hub_search)
    hub_files = hub_sub.add_parser("files", help="a repo's GGUF files grouped by quant, with sizes; --plan: how "
                                                 "each fits this machine, read from its header")
    hub_files.add_argument("repo", metavar="OWNER/NAME")
    hub_files.add_argument("--plan", action="store_true", help="read each file's header and plan it (the page's table)")
    hub_files.add_argument("--vram-gb", type=float, help="plan for a GPU with this many GiB free")
    hub_files.add_argument("--ctx", type=int, help="context length wanted (default: each model's full window)")
    hub_files.set_defaults(func=run_hub_files)


def hub_error_code(exc: HubError) -> HubExit:
    return HubExit.UNREACHABLE if exc.kind in ("offline", "rate-limited", "error") else HubExit.BAD_INPUT


def run_hub_search(args: argparse.Namespace) -> int:
    from app.fetch.hub import Hub, HubError

    try:
        found = Hub().search(args.query, limit=args.limit)
    except HubError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return hub_error_code(exc)
    if not found:
        print(f"no GGUF models match {args.query!r}")
        return HubExit.OK
    print(f"{'repo':<56} {'downloads':>10} {'likes':>6}  {'licence':<14} {'updated':<10}")
    for m in found:
        updated = m.last_modified.strftime("%Y-%m-%d") if m.last_modified else "?"
        gated = "  (gated)" if m.gated else ""
        print(f"{m.repo_id:<56} {m.downloads:>10,} {m.likes:>6,}  {m.license[:14]:<14} {updated:<10}{gated}")
    return HubExit.OK


def run_hub_files(args: argparse.Namespace) -> int:
    from app.fetch.hub import Hub, HubError, plan_files
    from app.machine.snapshot import Machine

    try:
        listing = Hub().listing(args.repo)
    except HubError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return hub_error_code(exc)
    gated = " · gated: accept the licence on the model page and set a token" if listing.gated else ""
    print(f"{listing.repo_id} · licence {listing.license or '?'}{gated}")
    plans = None
    if args.plan and listing.models:
        plans = plan_files(listing.repo_id, listing.models, Machine.read(), plan_request(args))
    for i, m in enumerate(listing.models):
        parts = f" ({len(m.parts)} parts)" if len(m.parts) > 1 else ""
        missing = f" MISSING {m.missing_parts} part(s)" if m.missing_parts > 0 else ""
        line = f"  {m.name:<60} {m.quant or '?':<11} {m.size / 1e9:7.2f} GB{parts}{missing}"
        if plans:
            p = plans[i]
            mark = "★ " if p.recommended else "  "
            line = f"{mark}{line.strip()}\n      {p.summary()}"
            line += f"\n      recommended: {p.why}" if p.recommended else ""
        print(line)
    for title, files in (("vision projectors (mmproj), not models", listing.mmproj), ("other files", listing.other)):
        if files:
            print(f"{title}: " + ", ".join(f.path for f in files))
    if plans is not None and not any(p.recommended for p in plans):
        print("nothing in this repo fits this machine")
        return HubExit.NOTHING_FITS
    return HubExit.OK


def hub_entry(spec: str) -> CatalogEntry:
    """A catalog entry for `hub:REPO[:FILE_OR_QUANT]`: the file named, else the one recommended here."""
    from app.fetch.catalog import entry_for_hub
    from app.fetch.hub import Hub, parse_hub_spec, pick, plan_files
    from app.machine.snapshot import Machine

    repo, choice = parse_hub_spec(spec)
    listing = Hub().listing(repo)
    plans = None if choice else plan_files(repo, listing.models, Machine.read())
    model = pick(listing, choice, plans)
    return entry_for_hub(repo, model)
