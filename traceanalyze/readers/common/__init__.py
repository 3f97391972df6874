"""What several formats share: file heads and input limits, units and demangling (`core`),
SQLite access, serial, streamed and parallel (`sqlite*`), the stream helpers (`stream`),
detection's screen (`screen`), CUPTI callback ids (`cupti`). Nothing here knows a format's
private names; a format package imports from here, never from another format's package."""
