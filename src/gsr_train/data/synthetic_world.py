"""The global knowledge graph of the synthetic benchmark: a small, Freebase-shaped world.

People live in families over three generations (parents, children, marriages, siblings),
are born and die in cities that sit in regions and countries, study at universities, work
for and found organisations, and act in, direct, write and produce films. The shape is
what matters for retrieval, so it copies Freebase where Freebase makes retrieval hard:

* both directions of a property are separate triples (``film.film.directed_by`` and
  ``film.director.film``);
* marriages, sibling pairs, studies, jobs, places lived, film roles and head-office
  addresses are mediator (CVT) nodes named like raw mids (``m.0b7k2x``) that carry no
  text, so those answers are two hops away through a node the text encoder cannot see;
* gender, nationality, profession, religion, spoken languages, film genre, country and
  language point to a handful of hub entities (``Male``, ``United States of America``,
  ``Actor``) of very high degree that join almost any two entities in two hops.

Everything is drawn from one seeded ``numpy`` generator per stage, entities are integers
and no Python ``set`` of strings is ever iterated, so the same config gives the same world.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np

from gsr_train.data import synthetic_schema as S

if TYPE_CHECKING:  # pragma: no cover
    from gsr_train.data.synthetic_config import SyntheticConfig

MID_CHARS = np.array(list("0123456789bcdfghjklmnpqrstvwxyz_"))


class World:
    """Entities (names, types), relations and triples of the global KG, plus lookups."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.names: list[str] = []
        self.types: list[str] = []
        self.gender: dict[int, str] = {}
        self.by_type: dict[str, list[int]] = defaultdict(list)
        self._taken: set[str] = set()
        self.relations: list[str] = []
        self.rel_id: dict[str, int] = {}
        self._h: list[int] = []
        self._r: list[int] = []
        self._t: list[int] = []
        self._out: dict[tuple[int, int], list[int]] | None = None
        self._in: dict[tuple[int, int], list[int]] | None = None

    # ---------------------------------------------------------------- building
    def taken(self, name: str) -> bool:
        return name in self._taken

    def entity(self, name: str, etype: str) -> int:
        if name in self._taken:
            raise ValueError(f"synthetic world: entity name {name!r} is used twice")
        self._taken.add(name)
        self.names.append(name)
        self.types.append(etype)
        idx = len(self.names) - 1
        self.by_type[etype].append(idx)
        return idx

    def mediator(self, kind: str) -> int:
        """A nameless CVT node, named like a raw Freebase mid (``m.0`` + 5 characters)."""
        while True:
            name = "m.0" + "".join(self.rng.choice(MID_CHARS, 5))
            if name not in self._taken:
                return self.entity(name, "cvt:" + kind)

    def rel(self, name: str) -> int:
        idx = self.rel_id.get(name)
        if idx is None:
            idx = self.rel_id[name] = len(self.relations)
            self.relations.append(name)
        return idx

    def add(self, head: int, relation: str, tail: int) -> None:
        """Add a triple and, when Freebase stores one, its reverse property as well."""
        self._h.append(head)
        self._r.append(self.rel(relation))
        self._t.append(tail)
        inverse = S.INVERSES.get(relation)
        if inverse is not None:
            self._h.append(tail)
            self._r.append(self.rel(inverse))
            self._t.append(head)

    def finalize(self) -> None:
        """Freeze triples into arrays (duplicates dropped, first occurrence kept)."""
        trip = np.stack([np.array(self._h), np.array(self._r), np.array(self._t)], axis=1)
        _, first = np.unique(trip, axis=0, return_index=True)
        trip = trip[np.sort(first)]
        self.heads, self.rels, self.tails = (trip[:, k].astype(np.int64) for k in range(3))
        n = len(self.names)
        self.degree = np.bincount(np.concatenate([self.heads, self.tails]), minlength=n)
        out: dict[tuple[int, int], list[int]] = defaultdict(list)
        inn: dict[tuple[int, int], list[int]] = defaultdict(list)
        for h, r, t in trip.tolist():
            out[(h, r)].append(t)
            inn[(t, r)].append(h)
        self._out, self._in = dict(out), dict(inn)

    # ---------------------------------------------------------------- queries
    @property
    def num_triples(self) -> int:
        return int(self.heads.shape[0])

    def follow(self, sources: list[int], step: str) -> list[int]:
        """Entities reached from ``sources`` by one chain step (``~rel`` = walk backwards)."""
        backward = step.startswith("~")
        rel = self.rel_id.get(step.lstrip("~"))
        if rel is None:
            return []
        table = self._in if backward else self._out
        if table is None:
            raise RuntimeError("call finalize() before following chain steps")
        seen: dict[int, None] = {}
        for s in sources:
            for t in table.get((s, rel), ()):
                seen[t] = None
        return list(seen)

    def is_mediator(self, e: int) -> bool:
        return self.types[e].startswith("cvt:")


# ---------------------------------------------------------------------- name makers
def _pick(rng: np.random.Generator, seq, p=None):
    return seq[int(rng.choice(len(seq), p=p))]


def _syllable_name(rng: np.random.Generator, parts: int) -> str:
    return "".join(_pick(rng, S.SYLLABLES) for _ in range(parts)).capitalize()


def _unique(world: World, make, what: str, tries: int = 200) -> str:
    for _ in range(tries):
        name = make()
        if not world.taken(name):
            return name
    raise RuntimeError(f"synthetic world: could not find a fresh {what} name; lower the number of {what}s")


def _city_name(rng) -> str:
    u = rng.random()
    if u < 0.2:
        return f"{_pick(rng, S.CITY_PREFIX)} {_syllable_name(rng, 2)}"
    return _syllable_name(rng, int(rng.integers(1, 3))) + _pick(rng, S.CITY_SUFFIX)


def _film_title(rng) -> str:
    u = rng.random()
    adj, noun, noun2 = _pick(rng, S.FILM_ADJ), _pick(rng, S.FILM_NOUN), _pick(rng, S.FILM_NOUN)
    if u < 0.35:
        return f"The {adj} {noun}"
    if u < 0.6:
        return f"{adj} {noun}"
    if u < 0.8:
        return f"The {noun} of the {noun2}" if noun != noun2 else f"The {noun}"
    return f"{noun} of {_syllable_name(rng, 2)}" if rng.random() < 0.4 else f"{adj} {noun}s"


# ---------------------------------------------------------------------- world
def _zipf(n: int, a: float = 1.0) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1) ** a
    return weights / weights.sum()


def build_world(cfg: SyntheticConfig) -> World:
    """Generate the global KG for ``cfg`` (deterministic in ``cfg.seed``)."""
    return _WorldBuilder(cfg).build()


class _WorldBuilder:
    """Fills a `World` stage by stage; the stages share places, hubs and people."""

    def __init__(self, cfg: SyntheticConfig) -> None:
        self.cfg = cfg
        self.rng = np.random.default_rng([cfg.seed, 1])
        self.w = World(self.rng)
        self.home: dict[int, int] = {}  # person -> country
        self.generations: list[list[int]] = []
        self.roles: dict[str, list[int]] = {role: [] for role, _, _ in S.ROLES}

    def build(self) -> World:
        self.hubs()
        self.places()
        self.organisations()
        self.universities()
        self.people()
        self.careers()
        self.films()
        self.w.finalize()
        return self.w

    # ------------------------------------------------------------ helpers
    def pick(self, seq, p=None):
        return _pick(self.rng, seq, p)

    def country(self) -> int:
        return self.countries[int(self.rng.choice(len(self.countries), p=self.cweight))]

    def city_in(self, country: int, home_prob: float = 0.9) -> int:
        if self.rng.random() < home_prob:
            return self.pick(self.cities_of[country])
        return self.pick(self.w.by_type["city"])

    # ------------------------------------------------------------ stages
    def hubs(self) -> None:
        w, rng = self.w, self.rng
        self.genders = {g: w.entity(g, "gender") for g in S.GENDERS}
        self.professions = {p: w.entity(p, "profession") for p in S.PROFESSIONS}
        self.religions = [w.entity(r, "religion") for r in S.RELIGIONS]
        self.genres = [w.entity(g, "genre") for g in S.FILM_GENRES]
        self.degrees = [w.entity(d, "degree") for d in S.DEGREES]
        self.titles = [w.entity(t, "job_title") for t in S.JOB_TITLES]
        self.unions = [w.entity(u, "union_type") for u in S.UNION_TYPES]
        chosen = S.COUNTRIES[: self.cfg.num_countries]
        languages: dict[str, int] = {}
        for lang in [c[1] for c in chosen] + list(S.EXTRA_LANGUAGES):
            if lang not in languages:
                languages[lang] = w.entity(lang, "language")
        self.languages = list(languages.values())
        self.english = languages.get("English Language", self.languages[0])
        self.countries = [w.entity(name, "country") for name, _, _ in chosen]
        self.cweight = np.array([c[2] for c in chosen], dtype=float)
        self.cweight /= self.cweight.sum()
        self.official = {c: languages[chosen[k][1]] for k, c in enumerate(self.countries)}
        for c in self.countries:
            w.add(c, S.OFFICIAL_LANGUAGE, self.official[c])
            w.add(c, S.LANGUAGES_SPOKEN, self.official[c])
            if self.official[c] != self.english and rng.random() < 0.3:
                w.add(c, S.LANGUAGES_SPOKEN, self.english)
            if rng.random() < 0.3:
                w.add(c, S.LANGUAGES_SPOKEN, self.pick(self.languages))

    def places(self) -> None:
        """Regions (at least one per country), then cities in a region of a country;
        as in Freebase a city is contained by both its region and its country."""
        w, rng, cfg = self.w, self.rng, self.cfg
        n_countries = len(self.countries)
        regions_of: dict[int, list[int]] = defaultdict(list)
        extra = rng.choice(n_countries, max(cfg.num_regions - n_countries, 0), p=self.cweight)
        for k in sorted(list(range(n_countries)) + [int(x) for x in extra]):
            country = self.countries[k]
            suffix = self.pick(S.REGION_SUFFIX)

            def make(suffix=suffix):
                return f"{_syllable_name(rng, 2)} {suffix}" if rng.random() < 0.5 else _syllable_name(rng, 3)

            r = w.entity(_unique(w, make, "region"), "region")
            regions_of[country].append(r)
            w.add(r, S.CONTAINEDBY, country)
            w.add(r, S.DIVISION_COUNTRY, country)
        self.cities_of: dict[int, list[int]] = defaultdict(list)
        self.city_country: dict[int, int] = {}
        extra = rng.choice(n_countries, max(cfg.num_cities - n_countries, 0), p=self.cweight)
        for k in list(range(n_countries)) + [int(x) for x in extra]:
            country = self.countries[k]
            c = w.entity(_unique(w, lambda: _city_name(rng), "city"), "city")
            w.add(c, S.CONTAINEDBY, self.pick(regions_of[country]))
            w.add(c, S.CONTAINEDBY, country)
            self.cities_of[country].append(c)
            self.city_country[c] = country
        for country in self.countries:
            w.add(country, S.CAPITAL, self.cities_of[country][0])

    def organisations(self) -> None:
        """Companies and (a quarter of them) film studios, each with a head-office CVT."""
        w, rng = self.w, self.rng
        self.orgs: list[int] = []
        self.studios: list[int] = []
        self.org_country: dict[int, int] = {}
        n = self.cfg.num_organisations
        for k in range(n):
            is_studio = k < max(1, n // 4)
            suffixes = S.STUDIO_SUFFIX if is_studio else S.ORG_SUFFIX

            def make(suffixes=suffixes):
                stem = self.pick(S.LAST) if rng.random() < 0.4 else _syllable_name(rng, 2)
                return f"{stem} {self.pick(suffixes)}"

            o = w.entity(_unique(w, make, "organisation"), "org")
            country = self.country()
            city = self.city_in(country)
            hq = w.mediator("address")
            w.add(o, S.HEADQUARTERS, hq)
            w.add(hq, S.ADDRESS_CITY, city)
            if rng.random() < 0.6:
                w.add(o, S.PLACE_FOUNDED, city if rng.random() < 0.7 else self.city_in(country))
            (self.studios if is_studio else self.orgs).append(o)
            self.org_country[o] = self.city_country[city]

    def universities(self) -> None:
        """Universities in a city, named after it, after a person or made up."""
        w, rng = self.w, self.rng
        self.unis: list[int] = []
        self.uni_country: dict[int, int] = {}
        for _ in range(self.cfg.num_universities):
            city = self.pick(self.cities_of[self.country()])

            def make(city=city):
                u = rng.random()
                if u < 0.4:
                    return f"University of {w.names[city]}"
                if u < 0.55:
                    return f"{w.names[city]} Institute of Technology"
                if u < 0.8:
                    return f"{self.pick(S.LAST)} College"
                return f"{_syllable_name(rng, 2)} University"

            u = w.entity(_unique(w, make, "university"), "university")
            w.add(u, S.CONTAINEDBY, city)
            self.unis.append(u)
            self.uni_country[u] = self.city_country[city]

    def people(self) -> None:
        """Three generations of families with marriages, siblings and influences, then
        each person's places, religion, languages, professions and film/business roles."""
        n = self.cfg.num_people
        sizes = [int(n * 0.3), int(n * 0.35)]
        sizes.append(n - sum(sizes))
        self.birth: dict[int, int] = {}
        self.children_of: dict[tuple[int, int], list[int]] = defaultdict(list)
        couples: list[tuple[int, int]] = []
        for size in sizes:
            members = []
            for _ in range(size):
                parents = None
                if couples and self.rng.random() < 0.7:
                    parents = couples[int(self.rng.integers(len(couples)))]
                members.append(self.new_person(parents))
            self.generations.append(members)
            couples = self.marry_generation(members)
        self.siblings()
        self.influences()
        for g, members in enumerate(self.generations):
            for p in members:
                self.person_facts(p, g)

    def new_person(self, parents: tuple[int, int] | None) -> int:
        w, rng = self.w, self.rng
        gender = "Male" if rng.random() < 0.5 else "Female"
        firsts = S.MALE_FIRST if gender == "Male" else S.FEMALE_FIRST
        # children mostly carry their father's family name
        family = w.names[parents[0]].split()[-1] if parents is not None and rng.random() < 0.8 else self.pick(S.LAST)

        def make():
            return f"{self.pick(firsts)} {family if rng.random() < 0.9 else self.pick(S.LAST)}"

        def make_with_initial():
            return f"{self.pick(firsts)} {chr(65 + int(rng.integers(26)))}. {self.pick(S.LAST)}"

        try:
            name = _unique(w, make, "person", tries=60)
        except RuntimeError:
            name = _unique(w, make_with_initial, "person")
        p = w.entity(name, "person")
        w.gender[p] = gender
        if parents is not None:
            self.home[p] = self.home[parents[0]]
            for parent in parents:
                w.add(p, S.PARENTS, parent)
            same = rng.random() < 0.35
            self.birth[p] = self.birth[parents[int(rng.integers(2))]] if same else self.city_in(self.home[p])
            self.children_of[parents].append(p)
        else:
            self.home[p] = self.country()
            self.birth[p] = self.city_in(self.home[p])
        w.add(p, S.GENDER, self.genders[gender])
        w.add(p, S.BIRTH, self.birth[p])
        w.add(p, S.NATIONALITY, self.home[p])
        if rng.random() < 0.05:
            w.add(p, S.NATIONALITY, self.country())
        return p

    def marry(self, a: int, b: int) -> None:
        w = self.w
        m = w.mediator("marriage")
        w.add(a, S.SPOUSE_S, m)
        w.add(b, S.SPOUSE_S, m)
        w.add(m, S.MARRIAGE_TYPE, self.unions[0] if self.rng.random() < 0.9 else self.unions[1])
        if self.rng.random() < 0.5:
            w.add(m, S.MARRIAGE_PLACE, self.city_in(self.home[a], 0.8))

    def marry_generation(self, members: list[int]) -> list[tuple[int, int]]:
        """Marriages inside one generation (never between siblings); some marry twice."""
        rng, w = self.rng, self.w
        men = [p for p in members if w.gender[p] == "Male"]
        women = [p for p in members if w.gender[p] == "Female"]
        rng.shuffle(men)
        rng.shuffle(women)
        parents_of = {c: pc for pc, kids in self.children_of.items() for c in kids}
        couples = []
        for a, b in zip(men, women):
            if rng.random() < 0.7 and (a not in parents_of or parents_of.get(a) != parents_of.get(b)):
                self.marry(a, b)
                couples.append((a, b))
        married = {p for c in couples for p in c}
        single = [p for p in members if p not in married]
        for a, _ in couples:
            if single and rng.random() < 0.12:
                b = single.pop(int(rng.integers(len(single))))
                if w.gender[b] != w.gender[a]:
                    self.marry(a, b)
        return couples

    def siblings(self) -> None:
        """One sibling-relationship CVT per pair of children of the same couple."""
        for kids in self.children_of.values():
            for i in range(len(kids)):
                for j in range(i + 1, len(kids)):
                    m = self.w.mediator("sibling")
                    self.w.add(kids[i], S.SIBLING_S, m)
                    self.w.add(kids[j], S.SIBLING_S, m)

    def influences(self) -> None:
        """Direct person -> person links to someone of the same or an older generation,
        drawn by popularity so that a few people influenced many."""
        earlier: list[int] = []
        for members in self.generations:
            earlier = earlier + members
            popularity = _zipf(len(earlier), 0.6)
            for p in members:
                for _ in range(int(self.rng.choice(3, p=[0.55, 0.3, 0.15]))):
                    q = earlier[int(self.rng.choice(len(earlier), p=popularity))]
                    if q != p:
                        self.w.add(p, S.INFLUENCED_BY, q)

    def person_facts(self, p: int, generation: int) -> None:
        w, rng = self.w, self.rng
        country = self.home[p]
        if rng.random() < (0.7, 0.25, 0.03)[generation]:
            w.add(p, S.DEATH, self.city_in(country, 0.85))
        for _ in range(int(rng.choice(3, p=[0.45, 0.4, 0.15]))):
            m = w.mediator("place_lived")
            w.add(p, S.PLACES_LIVED, m)
            w.add(m, S.LIVED_LOCATION, self.city_in(country, 0.8))
        if rng.random() < 0.6:
            w.add(p, S.RELIGION, self.pick(self.religions, RELIGION_P))
        w.add(p, S.LANGUAGES, self.official[country])
        if self.official[country] != self.english and rng.random() < 0.4:
            w.add(p, S.LANGUAGES, self.english)
        if rng.random() < 0.12:
            w.add(p, S.LANGUAGES, self.pick(self.languages))
        roles = []
        u = rng.random()
        for role, _, share in S.ROLES:
            if u < share:
                roles.append(role)
                break
            u -= share
        if roles and roles[0] == "actor" and rng.random() < 0.08:
            roles.append("director")
        if roles and roles[0] == "director" and rng.random() < 0.3:
            roles.append("writer")
        prof_of = {role: prof for role, prof, _ in S.ROLES}
        profs = [prof_of[r] for r in roles]
        if not profs or rng.random() < 0.3:
            profs.append(self.pick([x for x in S.PROFESSIONS if x not in prof_of.values()]))
        for prof in dict.fromkeys(profs):
            w.add(p, S.PROFESSION, self.professions[prof])
        for r in roles:
            self.roles[r].append(p)

    def careers(self) -> None:
        """Studies and jobs (mediator-heavy two-hop facts) and organisation founders."""
        w, rng = self.w, self.rng
        all_orgs = self.orgs + self.studios
        uni_by_country: dict[int, list[int]] = defaultdict(list)
        for u in self.unis:
            uni_by_country[self.uni_country[u]].append(u)
        org_by_country: dict[int, list[int]] = defaultdict(list)
        for o in all_orgs:
            org_by_country[self.org_country[o]].append(o)
        for members in self.generations:
            for p in members:
                country = self.home[p]
                for _ in range(int(rng.choice(3, p=[0.35, 0.5, 0.15]))):
                    local = uni_by_country.get(country)
                    u = self.pick(local) if local and rng.random() < 0.7 else self.pick(self.unis)
                    m = w.mediator("education")
                    w.add(p, S.EDUCATION, m)
                    w.add(m, S.EDU_INSTITUTION, u)
                    if rng.random() < 0.7:
                        w.add(m, S.EDU_DEGREE, self.pick(self.degrees))
                for _ in range(int(rng.choice(3, p=[0.4, 0.45, 0.15]))):
                    local = org_by_country.get(country)
                    o = self.pick(local) if local and rng.random() < 0.7 else self.pick(all_orgs)
                    m = w.mediator("employment")
                    w.add(p, S.EMPLOYMENT, m)
                    w.add(m, S.TENURE_COMPANY, o)
                    if rng.random() < 0.5:
                        w.add(m, S.TENURE_TITLE, self.pick(self.titles))
        founders = self.roles["founder"] or [p for g in self.generations for p in g]
        for o in all_orgs:
            for _ in range(1 if rng.random() < 0.65 else 2):
                w.add(o, S.FOUNDERS, self.pick(founders))

    def films(self) -> None:
        """Films with directors, writers, producers, crew, studio, genres and a cast of
        performance CVTs (actor + film + often a named character)."""
        w, rng, cfg = self.w, self.rng, self.cfg
        everyone = [p for g in self.generations for p in g]
        pools = {}
        for role in ("actor", "director", "writer", "producer", "composer", "cinematographer", "editor"):
            members = list(self.roles[role]) or everyone
            rng.shuffle(members)  # the order is the popularity rank
            pools[role] = (members, _zipf(len(members), 0.8))

        def draw(role: str, k: int, avoid: tuple = ()) -> list[int]:
            members, p = pools[role]
            picked: list[int] = []
            for _ in range(8 * k):
                if len(picked) == k:
                    break
                x = members[int(rng.choice(len(members), p=p))]
                if x not in picked and x not in avoid:
                    picked.append(x)
            return picked

        def character() -> str:
            if rng.random() < 0.5:
                return f"{self.pick(S.CHARACTER_TITLE)} {self.pick(S.LAST)}"
            first = self.pick(S.MALE_FIRST if rng.random() < 0.5 else S.FEMALE_FIRST)
            return f"{first} {self.pick(S.LAST)}"

        genre_p = _zipf(len(self.genres), 0.7)
        for _ in range(cfg.num_films):
            f = w.entity(_unique(w, lambda: _film_title(rng), "film"), "film")
            directors = draw("director", 1 if rng.random() < 0.9 else 2)
            for d in directors:
                w.add(f, S.DIRECTED_BY, d)
            country = self.home[directors[0]] if rng.random() < 0.8 else self.country()
            w.add(f, S.FILM_COUNTRY, country)
            w.add(f, S.FILM_LANGUAGE, self.official[country] if rng.random() < 0.85 else self.english)
            writers = [directors[0]] if rng.random() < 0.4 else []
            writers += draw("writer", 1 if rng.random() < 0.7 else 2, tuple(writers))
            for x in writers:
                w.add(f, S.WRITTEN_BY, x)
            if rng.random() < 0.7:
                for x in draw("producer", 1 if rng.random() < 0.7 else 2):
                    w.add(f, S.PRODUCED_BY, x)
            for role, relation, prob in S.CREW:
                if rng.random() < prob:
                    w.add(f, relation, draw(role, 1)[0])
            for g in dict.fromkeys(int(i) for i in rng.choice(len(self.genres), int(rng.integers(1, 3)), p=genre_p)):
                w.add(f, S.FILM_GENRE, self.genres[g])
            local = [s for s in self.studios if self.org_country[s] == country]
            w.add(
                f, S.PRODUCTION_COMPANY, self.pick(local) if local and rng.random() < 0.6 else self.pick(self.studios)
            )
            for actor in draw("actor", int(rng.integers(cfg.min_cast, cfg.max_cast + 1)), tuple(directors)):
                m = w.mediator("performance")
                w.add(actor, S.ACTOR_FILM, m)
                w.add(f, S.STARRING, m)
                if rng.random() < 0.75:
                    w.add(m, S.PERF_CHARACTER, w.entity(_unique(w, character, "character"), "character"))


RELIGION_P = np.array([0.45, 0.2, 0.1, 0.1, 0.07, 0.08])
