"""Rewrite each run record's config in the module's current form, keeping its hash.

A record written before a setting existed lacks that field (or still carries one the model no
longer has); reading it filled the default in (or dropped the field) every time. This writes the
config as `RunConfig.from_dict(config).to_dict()` gives it, once, after checking that the hash the
record is named by does not change, so records need no reading-time repair. Every other field of
a record, and every weights file, is left as it is. Run from the repository root:

    .venv/bin/python tools/migrate_records.py [results]

It prints how many records it rewrote and stops, writing nothing, at the first record whose hash
would change.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lengen_helpers as L  # noqa: E402


def migrated(record: dict) -> dict:
    """The record with its config in the current form; raises if its hash would change."""
    config = L.RunConfig.from_dict(record["config"]).to_dict()
    revision = record["training_revision"]
    if L.config_hash(config, revision) != record["config_hash"]:
        raise ValueError(f"{record['name']}: the current config form would not keep hash {record['config_hash']}")
    return record | {"config": config}


def main(results: Path) -> int:
    paths = sorted(results.glob("**/runs/*.json"))
    new = {path: migrated(json.loads(path.read_text())) for path in paths}  # every check before any write
    changed = [path for path in paths if new[path] != json.loads(path.read_text())]
    for path in changed:
        L._atomic_json(path, new[path])
    print(f"{len(changed)} of {len(paths)} records rewritten; every hash kept")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else L.RESULTS_DIR))
