"""Where a level's files live: the storage-level contract (:mod:`.level_storage`), the node-local and global
directory levels (:mod:`.node_local`, :mod:`.global_dir`), and the store contract with its POSIX directory
implementation (:mod:`.store`, :mod:`.dirstore`). The level table that names them is
:mod:`ftkit.storage.levels`."""
