#!/usr/bin/env python3
"""Ingest many traces into one store with Dask workers started as Slurm jobs (dask-jobqueue).

    python collectors/slurm/ingest_dask.py runs/*/*.json.gz --store /scratch/$USER/store \\
        --cores 8 --memory 32GB --walltime 01:00:00 --jobs 4 [--queue Q] [--account A]

Runs on a login node (or in a small batch job): starts a Dask scheduler here, submits `--jobs`
Slurm jobs of `--cores` cores and `--memory` each (one worker process per job, one thread per
core), parses one file per task on them, and commits into the store from here. Files, the store
and this Python environment must be on a file system every node sees (the workers run
`sys.executable`). `--dry-run` prints the Slurm job script and submits nothing.

Needs `pip install 'traceanalyze[dask]'` (dask[distributed], dask-jobqueue).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path, help="trace files to ingest")
    ap.add_argument("--store", required=True, type=Path, help="store directory (shared FS)")
    ap.add_argument("--cores", type=int, default=4, help="cores per Slurm job (default 4)")
    ap.add_argument("--memory", default="16GB", help="memory per Slurm job (default 16GB)")
    ap.add_argument("--walltime", default="01:00:00", help="per job, HH:MM:SS (default 1 h)")
    ap.add_argument("--jobs", type=int, default=2, help="Slurm jobs to start (default 2)")
    ap.add_argument("--queue", default=None, help="Slurm partition")
    ap.add_argument("--account", default=None, help="Slurm account")
    ap.add_argument("--interface", default=None, help="network interface for Dask, e.g. ib0")
    ap.add_argument("--format", default=None, help="reader slug; detected when omitted")
    ap.add_argument("--force", action="store_true", help="re-ingest files already in the store")
    ap.add_argument("--dry-run", action="store_true", help="print the job script and stop")
    return ap.parse_args(argv)


def make_cluster(a: argparse.Namespace):  # type: ignore[no-untyped-def]  # dask_jobqueue is untyped
    from dask_jobqueue import SLURMCluster

    return SLURMCluster(
        cores=a.cores,
        processes=1,  # one worker process per job; its threads parse files side by side
        memory=a.memory,
        walltime=a.walltime,
        queue=a.queue,
        account=a.account,
        python=sys.executable,
        interface=a.interface,
        # one thread per core, but the readers release the GIL in polars/zlib/msgspec only in
        # part: more, smaller jobs beat fewer, larger ones (processes=1 keeps jobs simple).
    )


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    try:
        from distributed import Client
    except ImportError:
        print("ingest_dask.py: needs pip install 'traceanalyze[dask]'", file=sys.stderr)
        return 2
    from traceanalyze.errors import TraceanalyzeError
    from traceanalyze.parallel import ingest_dask

    with make_cluster(a) as cluster:
        if a.dry_run:
            print(cluster.job_script())
            return 0
        cluster.scale(jobs=a.jobs)
        with Client(cluster) as client:
            client.wait_for_workers(1)  # the first job to start; later ones join as they start
            try:
                results = ingest_dask(
                    a.files, a.store, scheduler=client, format=a.format, force=a.force
                )
            except TraceanalyzeError as e:
                print(f"traceanalyze: error: {e}", file=sys.stderr)
                return 1
    for r in results:
        print(r.message())
    return 0


if __name__ == "__main__":
    sys.exit(main())
