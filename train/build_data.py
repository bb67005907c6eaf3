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
- held-out split by content hash: files whose hash falls in the last HELDOUT_PCT percent go to
  the evaluation set only (no text of theirs, or rewrite task built from them, is trained on).

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

HELDOUT_PCT = 2
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
        recipe["distributions"].append({"dist": name, "licence": lic})
        desc = long_description(meta)
        if desc:
            yield f"{name}/METADATA", None, desc
        for line in record.splitlines():
            rel = line.split(",", 1)[0]
            suffix = Path(rel).suffix
            if suffix not in CODE_EXT | DOC_EXT or rel.startswith(".."):
                continue
            path = site / rel
            if path.is_file():
                yield f"{name}/{rel}", path, None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    site = Path(sysconfig.get_paths()["purelib"])
    recipe = {
        "python": sys.version.split()[0],
        "stdlib": str(stdlib),
        "site_packages": str(site),
        "heldout_pct": HELDOUT_PCT,
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
            held = int(digest[:8], 16) % 100 >= 100 - HELDOUT_PCT
            row = json.dumps({"path": name, "source": source, "text": text, "sha256": digest})
            (fheld if held else ftrain).write(row + "\n")
            key = "heldout" if held else "train"
            stats[key] += 1
            stats[key + "_bytes"] += len(text.encode("utf-8"))

        pending: list[tuple[str, str, str, str]] = []
        for name, path in stdlib_files(stdlib):
            emit(name, "stdlib (PSF-2.0)", read_text(path))
        flush(None)
        current = None
        for name, path, text in site_files(site, recipe):
            dist = name.split("/", 1)[0]
            if dist != current:
                flush(MAX_DIST_BYTES)
                current = dist
            emit(name, dist, text if path is None else read_text(path))
        flush(MAX_DIST_BYTES)
    recipe["stats"] = stats
    (args.out / "recipe.json").write_text(json.dumps(recipe, indent=1))
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
