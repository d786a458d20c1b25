"""Every runner's options: typed dataclasses with their defaults, descriptions and ranges
(`.recipes`), checked by pydantic before any work (`.check`), Hydra's own composition
errors as the same one-line messages (`.command_line`), and printed (`.describe`)."""
