"""`patch`: a GGUF file's metadata fixed for upstream llama.cpp (app.model.patch). No Qt."""

from __future__ import annotations

import argparse
import sys

from app.cli.common import Commands, PatchExit, ProgressPrinter, in_words


def register_patch(sub: Commands) -> None:
    patch = sub.add_parser(
        "patch", help="fix a GGUF file's metadata for upstream llama.cpp (the Clover dialect)",
        description="Write a patched copy of SOURCE: new header, every tensor byte copied unchanged, verified, "
                    "renamed into place atomically. The source is never modified. Exit codes: 0 patched or "
                    "nothing needed, 1 a rule cannot apply, 2 bad input, 3 verification failed, 130 cancelled.")
    patch.add_argument("source", help="the GGUF file to patch")
    patch.add_argument("target", nargs="?", help="where to write (default: SOURCE_STEM.patched.gguf beside it)")
    patch.add_argument("--profile", default="clover", help="patch profile name or JSON file (default: clover)")
    patch.add_argument("--dry-run", action="store_true", help="report what each rule would do; write nothing")
    patch.add_argument("--verify-data", action="store_true", help="also compare every data byte with the source")
    patch.add_argument("--force", action="store_true", help="replace TARGET if it exists")
    patch.add_argument("--in-place", action="store_true",
                       help="rewrite only SOURCE's header, with an undo journal; refused unless the data section "
                            "stays where it is (the new header fits the old padding)")
    patch.add_argument("--quiet", action="store_true", help="no progress display")
    patch.set_defaults(func=run_patch)


def run_patch(args: argparse.Namespace) -> int:
    from app.gguf.gguf_file import GGUFError
    from app.model.patch import PatchCancelled, PatchError, VerificationError, patch_file, patch_in_place

    printer = ProgressPrinter(sys.stderr, every=0.1, overwrite=True)  # one line, rewritten
    progress = printer.bytes("copy") if not args.quiet and sys.stderr.isatty() else None
    if args.in_place and (args.target or args.dry_run or args.verify_data):
        print("error: --in-place takes no TARGET, --dry-run or --verify-data", file=sys.stderr)
        return PatchExit.BAD_INPUT
    try:
        if args.in_place:
            report = patch_in_place(args.source, args.profile)
        else:
            report = patch_file(args.source, args.target, args.profile, dry_run=args.dry_run,
                                verify_data=args.verify_data, overwrite=args.force, progress=progress)
    except KeyboardInterrupt:
        print("\ncancelled: nothing written", file=sys.stderr)
        return PatchExit.CANCELLED
    except PatchCancelled:
        print("cancelled: nothing written", file=sys.stderr)
        return PatchExit.CANCELLED
    except VerificationError as exc:
        print(f"error: verification failed, nothing kept: {exc}", file=sys.stderr)
        return PatchExit.VERIFY_FAILED
    except (GGUFError, PatchError, OSError) as exc:
        print(f"error: {in_words(exc)}", file=sys.stderr)
        return PatchExit.BAD_INPUT
    finally:
        printer.end()
    print(f"{report.source}  (profile {report.profile})")
    for result in report.results:
        print(f"  {result.line(report.dry_run)}")
    for note in report.notes:
        print(note)
    if report.written:
        mb_s = report.bytes_copied / 1e6 / max(report.seconds, 1e-9)
        print(f"wrote {report.target} in {report.seconds:.2f} s ({mb_s:.0f} MB/s, {report.method}); "
              f"header and tensors verified{', data bytes verified' if report.data_verified else ''}")
    return PatchExit.RULE_FAILED if report.failed else PatchExit.OK
