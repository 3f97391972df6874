"""Writers that turn store tables into other tools' formats (Chrome trace JSON for Perfetto)."""
