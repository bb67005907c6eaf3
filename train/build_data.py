"""Collect strata-tiny's training corpus from the Python installation on this machine.

Recipe (recorded in the output's recipe.json and in MODEL_CARD.md):
- the standard library of the running interpreter (PSF licence): every *.py file outside
  site-packages;
- installed distributions in site-packages whose licence metadata is permissive (MIT, BSD,
  Apache, PSF, ISC, public domain; anything mentioning GPL or MPL is skipped): their *.py /
  *.pyi sources (taken from the distribution's RECORD) and *.rst / *.md docs, plus the long
  description in METADATA;
- filters: UTF-8 only, 64 B .. 100 KB, no line over 1000 characters, mostly printable;
- exact deduplication by SHA-256 of the file contents;
- at most MAX_DIST_BYTES of text per distribution (files taken in order of content hash), so
  that a few large packages (transformers, torch, sympy) do not dominate;
- held-out split by PACKAGE: every file of the distributions in HELDOUT_DISTS and of the
  standard-library packages in HELDOUT_STDLIB goes to the evaluation set only, so evaluation
  measures code the model has never seen anything of (not only unseen files of seen
  packages); vendored copies (`_vendor`, `vendored`) are dropped everywhere, since they would
  leak held-out packages (pip vendors rich, for one) into training; a held-out file whose
  exact text also occurs in a training package is dropped from the held-out side;
- `--hash-heldout-pct` additionally holds out that share of the remaining files by content
  hash (the v1 recipe used 2% and no package split).

Output: <out>/train.jsonl.gz, <out>/heldout.jsonl.gz (one {"path", "source", "text"} per
line) and <out>/recipe.json.

    python train/build_data.py --out .devdata/corpus
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import sys
import sysconfig
from email.parser import HeaderParser
from pathlib import Path

HELDOUT_PCT = 0
# Held out whole: chosen as well-known pure-Python projects with many modules of 2-10k
# characters (the size of files users edit), installed both on the GPU machine and on the
# development machine, so the demos can use held-out files too.
HELDOUT_DISTS = ("rich", "click", "werkzeug", "networkx", "markdown", "attrs", "jinja2")
HELDOUT_STDLIB = ("email", "asyncio", "tomllib", "zipfile")
VENDORED = re.compile(r"(^|/)(_vendor|vendored|_vendored|extern)(/|$)")
MIN_BYTES, MAX_BYTES = 64, 100_000
MAX_LINE = 1000
MAX_DIST_BYTES = 8_000_000  # per-distribution cap (stdlib uncapped); keeps big packages from dominating
PERMISSIVE = re.compile(r"MIT|BSD|Apache|PSF|Python Software Foundation|ISC|Public Domain|Unlicense|Zlib", re.I)
COPYLEFT = re.compile(r"GPL|MPL|Mozilla|EUPL|CDDL|Commons Clause|proprietary", re.I)
CODE_EXT = {".py", ".pyi"}
DOC_EXT = {".rst", ".md"}


def licence_of(meta_text: str) -> str:
    headers = HeaderParser().parsestr(meta_text, headersonly=True)
    parts = []
    for key in ("License-Expression", "License"):
        value = headers.get(key)
        if value and len(value) < 200:
            parts.append(value.strip())
    parts += [c for c in headers.get_all("Classifier") or [] if c.startswith("License ::")]
    return " | ".join(parts)


def summary_of(meta_text: str) -> str:
    headers = HeaderParser().parsestr(meta_text, headersonly=True)
    value = (headers.get("Summary") or "").strip()
    return value if len(value) < 300 and value.upper() != "UNKNOWN" else ""


def dist_base(name: str) -> str:
    """Distribution name without the version: 'rich-13.7.1' -> 'rich'."""
    return re.split(r"-\d", name, maxsplit=1)[0].lower().replace("_", "-")


def is_heldout(path: str) -> bool:
    head, _, rest = path.partition("/")
    if head == "stdlib":
        parts = rest.split("/")
        if parts[0] == "test" and len(parts) > 1:  # the packages' own tests go with them
            return parts[1].removeprefix("test_").removesuffix(".py") in HELDOUT_STDLIB
        return parts[0].removesuffix(".py") in HELDOUT_STDLIB
    return dist_base(head) in HELDOUT_DISTS


def long_description(meta_text: str) -> str:
    head, sep, body = meta_text.partition("\n\n")
    return body.strip() if sep else ""


def acceptable(text: str) -> bool:
    size = len(text.encode("utf-8"))
    if not MIN_BYTES <= size <= MAX_BYTES:
        return False
    if any(len(line) > MAX_LINE for line in text.splitlines()):
        return False
    printable = sum(ch.isprintable() or ch in "\n\t" for ch in text)
    return printable >= 0.98 * len(text)


def read_text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def stdlib_files(stdlib: Path):
    for path in sorted(stdlib.rglob("*.py")):
        rel = path.relative_to(stdlib)
        if rel.parts[0] in ("site-packages", "dist-packages") or "__pycache__" in rel.parts:
            continue
        yield f"stdlib/{rel.as_posix()}", path


def site_files(site: Path, recipe: dict):
    for dist in sorted(site.glob("*.dist-info")):
        meta = read_text(dist / "METADATA")
        record = read_text(dist / "RECORD")
        if meta is None or record is None:
            continue
        lic = licence_of(meta)
        name = dist.name.removesuffix(".dist-info")
        if not lic or COPYLEFT.search(lic) or not PERMISSIVE.search(lic):
            recipe["skipped_distributions"].append({"dist": name, "licence": lic})
            continue
        summary = summary_of(meta)
        recipe["distributions"].append({"dist": name, "licence": lic, "summary": summary,
                                        "heldout": dist_base(name) in HELDOUT_DISTS})
        desc = long_description(meta)
        if desc:
            yield f"{name}/METADATA", None, desc
        for line in record.splitlines():
            rel = line.split(",", 1)[0]
            suffix = Path(rel).suffix
            if suffix not in CODE_EXT | DOC_EXT or rel.startswith("..") or VENDORED.search(rel):
                continue
            path = site / rel
            if path.is_file():
                yield f"{name}/{rel}", path, None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--hash-heldout-pct", type=int, default=HELDOUT_PCT)
    args = ap.parse_args()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    site = Path(sysconfig.get_paths()["purelib"])
    recipe = {
        "python": sys.version.split()[0],
        "stdlib": str(stdlib),
        "site_packages": str(site),
        "heldout_pct": args.hash_heldout_pct,
        "heldout_dists": list(HELDOUT_DISTS),
        "heldout_stdlib": list(HELDOUT_STDLIB),
        "filters": {"min_bytes": MIN_BYTES, "max_bytes": MAX_BYTES, "max_line": MAX_LINE,
                    "max_dist_bytes": MAX_DIST_BYTES},
        "distributions": [],
        "skipped_distributions": [],
    }
    seen: set[str] = set()
    stats = {"files_seen": 0, "rejected": 0, "duplicates": 0, "capped": 0, "train": 0, "heldout": 0,
             "train_bytes": 0, "heldout_bytes": 0}
    args.out.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out / "train.jsonl.gz", "wt", compresslevel=6) as ftrain, \
            gzip.open(args.out / "heldout.jsonl.gz", "wt", compresslevel=6) as fheld:

        def emit(name: str, source: str, text: str | None) -> None:
            stats["files_seen"] += 1
            if text is None or not acceptable(text):
                stats["rejected"] += 1
                return
            digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
            if digest in seen:
                stats["duplicates"] += 1
                return
            seen.add(digest)
            pending.append((digest, name, source, text))

        def flush(cap: int | None) -> None:
            used = 0
            for digest, name, source, text in sorted(pending):
                size = len(text.encode("utf-8"))
                if cap is not None and used + size > cap:
                    stats["capped"] += 1
                    continue
                used += size
                write(digest, name, source, text)
            pending.clear()

        def write(digest: str, name: str, source: str, text: str) -> None:
            held = is_heldout(name) or int(digest[:8], 16) % 100 >= 100 - args.hash_heldout_pct
            row = {"path": name, "source": source, "text": text, "sha256": digest}
            if name.endswith("/METADATA"):
                row["summary"] = summaries.get(name.split("/", 1)[0], "")
            if held:
                held_rows.append(row)  # written at the end, minus texts also in training
                return
            train_hashes.add(digest)
            ftrain.write(json.dumps(row) + "\n")
            key = "train"
            stats[key] += 1
            stats[key + "_bytes"] += len(text.encode("utf-8"))

        pending: list[tuple[str, str, str, str]] = []
        held_rows: list[dict] = []
        train_hashes: set[str] = set()
        summaries: dict[str, str] = {}
        for name, path in stdlib_files(stdlib):
            emit(name, "stdlib (PSF-2.0)", read_text(path))
        flush(None)
        current = None
        for name, path, text in site_files(site, recipe):
            dist = name.split("/", 1)[0]
            if dist != current:
                flush(MAX_DIST_BYTES)
                current = dist
            if path is None and name.endswith("/METADATA"):
                summaries[dist] = next((d["summary"] for d in reversed(recipe["distributions"])
                                        if d["dist"] == dist), "")
            emit(name, dist, text if path is None else read_text(path))
        flush(MAX_DIST_BYTES)
        for row in held_rows:
            if row["sha256"] in train_hashes:
                stats["heldout_dropped_in_train"] = stats.get("heldout_dropped_in_train", 0) + 1
                continue
            fheld.write(json.dumps(row) + "\n")
            stats["heldout"] += 1
            stats["heldout_bytes"] += len(row["text"].encode("utf-8"))
    recipe["stats"] = stats
    (args.out / "recipe.json").write_text(json.dumps(recipe, indent=1))
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
