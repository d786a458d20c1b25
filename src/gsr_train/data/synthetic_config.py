"""Sizes and knobs of the embedded synthetic benchmark (its own module: the world, question and
benchmark builders all read it, and none of them imports another's config)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gsr_train.data.errors import SyntheticConfigError
from gsr_train.data.synthetic_schema import COUNTRIES
from gsr_train.io import stable_hash

GENERATOR_VERSION = 1
SPLITS = ("train", "validation", "test")


@dataclass(frozen=True)
class SyntheticConfig:
    """Sizes and knobs of the synthetic benchmark (defaults: the quickstart size)."""

    seed: int = 0
    # world
    num_people: int = 900
    num_films: int = 180
    num_cities: int = 100
    num_regions: int = 24
    num_countries: int = 12
    num_organisations: int = 60
    num_universities: int = 24
    min_cast: int = 3
    max_cast: int = 7
    # questions
    num_train: int = 800
    num_validation: int = 150
    num_test: int = 300
    two_hop_fraction: float = 0.5  # of the single-topic questions
    two_topic_fraction: float = 0.1
    missing_answer_fraction: float = 0.04
    max_answers: int = 8
    max_topic_degree: int = 150  # busier entities (hubs, stars) are never topic entities
    # per-question graphs
    max_triples: int = 500
    hub_fanout: int = 15  # edges kept per hub neighbour, besides those closing a path

    def __post_init__(self) -> None:

        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_fraction"):
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                    raise SyntheticConfigError(f"SyntheticConfig.{f.name} must be a number in [0, 1], got {value!r}")
                object.__setattr__(self, f.name, float(value))  # 1 and 1.0: same config, same cache key
            elif not isinstance(value, int) or isinstance(value, bool):
                raise SyntheticConfigError(f"SyntheticConfig.{f.name} must be an integer, got {value!r}")
            elif f.name != "seed" and value < (0 if f.name.startswith("num_") and f.name[4:] in SPLITS else 1):
                raise SyntheticConfigError(f"SyntheticConfig.{f.name} must be positive, got {value}")
        if not 1 <= self.num_countries <= len(COUNTRIES):
            raise SyntheticConfigError(
                f"SyntheticConfig.num_countries must be in 1..{len(COUNTRIES)}, got {self.num_countries}"
            )
        if self.num_regions < self.num_countries or self.num_cities < self.num_countries:
            raise SyntheticConfigError(
                "SyntheticConfig: need at least one region and one city per country "
                f"(num_regions={self.num_regions}, num_cities={self.num_cities}, "
                f"num_countries={self.num_countries})"
            )
        if self.min_cast > self.max_cast:
            raise SyntheticConfigError(f"SyntheticConfig.min_cast ({self.min_cast}) > max_cast ({self.max_cast})")
        if 2 * self.max_topic_degree > self.max_triples:
            raise SyntheticConfigError(
                f"SyntheticConfig.max_topic_degree ({self.max_topic_degree}) must be at most half of "
                f"max_triples ({self.max_triples}): every triple of the (up to two) topic entities is kept"
            )
        if self.num_people < 20:
            raise SyntheticConfigError(f"SyntheticConfig.num_people must be at least 20, got {self.num_people}")

    @classmethod
    def from_any(cls, config: SyntheticConfig | dict | None) -> SyntheticConfig:
        """Accept a config, a plain dict (e.g. from Hydra) or None (defaults)."""
        if config is None:
            return cls()
        if isinstance(config, cls):
            return config
        if hasattr(config, "items"):
            data = dict(config.items())
            known = {f.name for f in dataclasses.fields(cls)}
            unknown = sorted(set(data) - known)
            if unknown:
                raise SyntheticConfigError(f"SyntheticConfig: unknown option(s) {unknown}; known: {sorted(known)}")
            return cls(**data)
        raise TypeError(f"expected a SyntheticConfig or a dict, got {type(config).__name__}")

    def key(self) -> str:
        return stable_hash("synthetic", GENERATOR_VERSION, dataclasses.asdict(self))
