"""The checkpoint file and its stored forms: the container format and its header, the writers (plain,
compressed, early writeback), byte sources and partial reads, the differential (dCP) store, the state record,
global layouts. Nothing here knows about levels, groups or MPI."""
