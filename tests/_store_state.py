"""The committed state of a store read with the json module alone (not through traceanalyze):
the manifest (the checkpoint) and then, in version order, every log entry after its version, as
docs/store.md tells an outside engine to do. Tests compare what traceanalyze reads with this."""

from __future__ import annotations

import json
from pathlib import Path

MARKER = "traceanalyze-store.json"


def entries(store: Path) -> dict[int, Path]:
    """The log entries on disk by version (`_log/<20 digits>.json`)."""
    log = store / "_log"
    if not log.is_dir():
        return {}
    return {
        int(p.name[:20]): p
        for p in log.iterdir()
        if len(p.name) == 25 and p.name.endswith(".json") and p.name[:20].isdigit()
    }


def committed(store: Path) -> dict:
    """{"layout", "version", "sources": {sid: {table: [paths]}}, "garbage": [paths]}."""
    doc = json.loads((store / MARKER).read_text())
    version = doc.get("version", 0)
    sources = {sid: dict(s["files"]) for sid, s in doc.get("sources", {}).items()}
    garbage = [g["path"] for g in doc.get("garbage", [])]
    if doc["layout"] >= 3:
        log = entries(store)
        while version + 1 in log:
            version += 1
            e = json.loads(log[version].read_text())
            assert e["version"] == version
            for sid in e.get("remove", []):
                old = sources.pop(sid, {})
                garbage += [f for fs in old.values() for f in fs]
            for sid, s in e.get("add", {}).items():
                old = sources.get(sid, {})
                garbage += [f for fs in old.values() for f in fs]
                sources[sid] = dict(s["files"])
            garbage = [g for g in garbage if g not in set(e.get("purge", []))]
        assert not [v for v in log if v > version], "a gap in the log"
    return {"layout": doc["layout"], "version": version, "sources": sources, "garbage": garbage}


def listed(store: Path) -> set[str]:
    """Every file the committed state lists or keeps as garbage."""
    c = committed(store)
    return {f for t in c["sources"].values() for fs in t.values() for f in fs} | set(c["garbage"])
