"""Files and object stores: reading and writing a path on any store (:mod:`.fileio`), the
storage settings each path was given (:mod:`.storage`) and the option names the stores'
clients take (:mod:`.storage_options`). The floor every package that touches a snapshot
path, a sink's table or an upstream's folder stands on."""
