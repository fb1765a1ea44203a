"""The locate-and-rebuild engine and the offline tools on it: the group step every rebuild goes through
(:mod:`.rebuild`), where each rank's copy is on one host (:mod:`.copies`) and across hosts (:mod:`.holders`),
checking and repairing a whole checkpoint (:mod:`.checkpoints`), ``ftkit flush`` (:mod:`.flush`), and finding
a run from what a user names (:mod:`.locate`)."""
