"""PyTorch profiler (Kineto) Chrome-trace JSON: slug `kineto_json` (module `kineto_json`); the
other modules here are its own. Not screened: the reader is cheap to import."""
