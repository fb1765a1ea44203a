"""Group redundancy: the plans of what an L2/L3 group lost (:mod:`.plan`), the L2 partner copy streamed
between members (:mod:`.partner_copy`), the L3 Reed-Solomon/XOR group code (:mod:`.erasure`, one member's
share in
:mod:`._rs_group` / :mod:`._xor_group`, the parity file in :mod:`.parity`), and the same operations in one
process that sees every member's files (:mod:`.offline`)."""
