"""AMD ROCm profilers' own outputs (docs/howto-rocm.md; ../shared/docs/formats.md section 11):

* `rocprofv3_json`: rocprofv3 (rocprofiler-sdk) `--output-format json`, plain or gzip, streamed;
* `rocprofv3_csv`: rocprofv3 `*_kernel_trace.csv` (with `*_agent_info.csv` beside it);
* `rpd`: rocmProfileData (rpd_tracer) SQLite;
* `rocprof_csv`, `rocprof_sqlite`: rocprof v1 `results.csv` / `results.db` (`--stats`,
  `--timestamp on`); `results.stats.csv` is recognized and refused (pass results.csv);
* `rocm_smi_csv`: rocm-smi / amd-smi telemetry logs in CSV.

rocm-smi logs live here rather than in the `smi` family: their columns (edge and junction
temperatures, `cardN` devices, sweep-closing `<timestamp>,` rows) are AMD's, and the `smi`
family's readers stay NVIDIA's (nvidia-smi, NVML, DCGM); this package's other modules
(`names`, `devices`, `jsonstream`) are its own.
"""
