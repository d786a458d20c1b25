"""Every runner's options: typed dataclasses with their defaults, descriptions and ranges
(:mod:`.recipes`), checked by pydantic before any work (:mod:`.check`), Hydra's own composition
errors as the same one-line messages (:mod:`.command_line`), and printed (:mod:`.describe`)."""
