"""Questions of the synthetic benchmark: candidates per question family, then a seeded draw.

Every family of `synthetic_schema.FAMILIES` is a relation chain read from a topic
entity; its candidates are all topics for which the chain reaches between 1 and
``max_answers`` answers. Three special kinds need more than a chain: "who played {c} in
{x}" (the character pins one performance mediator) and the two-topic questions whose
answer is the intersection of two chains (director + actor, two co-stars, two parents).
The draw fixes the share of two-topic and two-hop questions first, then picks families
by weight and topics uniformly, without repeating a (family, topics) pair or a text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from gsr_train.data import synthetic_schema as S
from gsr_train.data.errors import SyntheticConfigError
from gsr_train.data.synthetic_world import World

if TYPE_CHECKING:  # pragma: no cover
    from gsr_train.data.synthetic_config import SyntheticConfig


@dataclass
class Question:
    family: str
    hops: int
    text: str
    topics: list[int]
    answers: list[int]
    chains: list[list[str]]  # one relation chain per topic ("~rel" = walked backwards)


@dataclass
class _Candidate:
    topics: tuple[int, ...]
    answers: list[int]
    templates: tuple[str, ...]
    slots: dict[str, str]


@dataclass
class _Pool:
    name: str
    hops: int
    weight: float
    chains: list[list[str]]
    candidates: list[_Candidate] = field(default_factory=list)
    cursor: int = 0


def _run_chain(world: World, topic: int, family: S.Family) -> list[int]:
    frontier = [topic]
    for step, (etype, gender) in zip(family.chain, family.filters):
        frontier = world.follow(frontier, step)
        if etype is not None:
            frontier = [e for e in frontier if world.types[e] == etype]
        if gender is not None:
            frontier = [e for e in frontier if world.gender.get(e) == gender]
        if not frontier:
            return []
    return [e for e in frontier if e != topic]


def _family_pool(world: World, family: S.Family, cfg: SyntheticConfig) -> _Pool:
    pool = _Pool(family.name, family.hops, family.weight, [list(family.chain)])
    for topic in world.by_type[family.topic_type]:
        if world.degree[topic] > cfg.max_topic_degree:
            continue
        answers = _run_chain(world, topic, family)
        if not 1 <= len(answers) <= cfg.max_answers:
            continue
        templates = family.templates
        for gender, extra in family.gendered:
            if all(world.gender.get(a) == gender for a in answers):
                templates = templates + extra
        pool.candidates.append(_Candidate((topic,), answers, templates, {"x": world.names[topic]}))
    return pool


def _character_pool(world: World, cfg: SyntheticConfig) -> _Pool:
    """ "who played {c} in {x}": film -> performance (pinned by its character) -> actor."""
    pool = _Pool("character_actor", 2, 1.0, [[S.STARRING, S.PERF_ACTOR]])
    for film in world.by_type["film"]:
        if world.degree[film] > cfg.max_topic_degree:
            continue
        for m in world.follow([film], S.STARRING):
            chars = world.follow([m], S.PERF_CHARACTER)
            actors = world.follow([m], S.PERF_ACTOR)
            if len(chars) == 1 and actors:
                slots = {"x": world.names[film], "c": world.names[chars[0]]}
                pool.candidates.append(_Candidate((film,), actors, S.CHARACTER_TEMPLATES, slots))
    return pool


def _intersection_pools(world: World, cfg: SyntheticConfig) -> list[_Pool]:
    """Two-topic questions: the answers are reached from both topics."""
    acted = [S.ACTOR_FILM, S.PERF_FILM]
    director_actor = _Pool("director_actor_film", 2, 1.0, [[S.DIRECTOR_FILM], acted])
    costar = _Pool("costar_film", 2, 1.0, [acted, acted])
    couple = _Pool("couple_children", 1, 0.7, [[S.CHILDREN], [S.CHILDREN]])

    def films_of(actor: int) -> list[int]:
        return world.follow(world.follow([actor], S.ACTOR_FILM), S.PERF_FILM)

    def ok(*topics: int) -> bool:
        return all(world.degree[t] <= cfg.max_topic_degree for t in topics)

    def add(pool: _Pool, a: int, b: int, answers: list[int], templates) -> None:
        if 1 <= len(answers) <= cfg.max_answers and ok(a, b):
            slots = {"a": world.names[a], "b": world.names[b]}
            pool.candidates.append(_Candidate((a, b), answers, templates, slots))

    seen: set[tuple[int, int, str]] = set()
    for film in world.by_type["film"]:
        actors = world.follow(world.follow([film], S.STARRING), S.PERF_ACTOR)
        for d in world.follow([film], S.DIRECTED_BY):
            for a in actors:
                if a != d and (d, a, "da") not in seen:
                    seen.add((d, a, "da"))
                    directed = world.follow([d], S.DIRECTOR_FILM)
                    films_a = films_of(a)
                    add(director_actor, d, a, [f for f in directed if f in films_a], S.DIRECTOR_ACTOR_TEMPLATES)
        for i, a in enumerate(actors):
            for b in actors[i + 1 :]:
                key = (min(a, b), max(a, b), "co")
                if key not in seen:
                    seen.add(key)
                    films_b = films_of(b)
                    add(costar, a, b, [f for f in films_of(a) if f in films_b], S.COSTAR_TEMPLATES)
    for m in world.by_type["cvt:marriage"]:
        spouses = world.follow([m], S.MARRIAGE_SPOUSE)
        if len(spouses) == 2:
            a, b = spouses
            kids_b = world.follow([b], S.CHILDREN)
            add(couple, a, b, [k for k in world.follow([a], S.CHILDREN) if k in kids_b], S.COUPLE_CHILD_TEMPLATES)
    return [director_actor, costar, couple]


def _draw(pools: list[_Pool], n: int, rng: np.random.Generator, used_texts: set[str], what: str) -> list[Question]:
    pools = [p for p in pools if p.candidates]
    for p in pools:
        p.candidates = [p.candidates[i] for i in rng.permutation(len(p.candidates))]
    out: list[Question] = []
    while len(out) < n:
        live = [p for p in pools if p.cursor < len(p.candidates)]
        if not live:
            raise SyntheticConfigError(
                f"synthetic benchmark: only {len(out)} distinct {what} questions fit this world but {n} "
                "were asked for; raise num_people / num_films or lower the number of questions"
            )
        weights = np.array([p.weight for p in live])
        pool = live[int(rng.choice(len(live), p=weights / weights.sum()))]
        cand = pool.candidates[pool.cursor]
        pool.cursor += 1
        template = cand.templates[int(rng.integers(len(cand.templates)))]
        text = template.format(**cand.slots).lower()
        if text in used_texts:
            continue
        used_texts.add(text)
        out.append(Question(pool.name, pool.hops, text, list(cand.topics), sorted(cand.answers), pool.chains))
    return out


def sample_questions(world: World, cfg: SyntheticConfig) -> list[Question]:
    """All questions of the benchmark, in draw order (the caller shuffles and splits)."""
    rng = np.random.default_rng([cfg.seed, 2])
    total = cfg.num_train + cfg.num_validation + cfg.num_test
    n_two_topic = int(round(total * cfg.two_topic_fraction))
    n_two_hop = int(round((total - n_two_topic) * cfg.two_hop_fraction))
    n_one_hop = total - n_two_topic - n_two_hop
    family_pools = [_family_pool(world, f, cfg) for f in S.FAMILIES]
    one_hop = [p for p in family_pools if p.hops == 1]
    two_hop = [p for p in family_pools if p.hops == 2] + [_character_pool(world, cfg)]
    used: set[str] = set()
    questions = _draw(one_hop, n_one_hop, rng, used, "one-hop")
    questions += _draw(two_hop, n_two_hop, rng, used, "two-hop")
    questions += _draw(_intersection_pools(world, cfg), n_two_topic, rng, used, "two-topic")
    return questions
