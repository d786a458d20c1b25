"""Vocabulary of the embedded synthetic benchmark: name parts, Freebase-style relation ids
and the natural-language question families.

Kept apart from the generator so that the world's *content* (what a city is called, how a
spouse question is phrased) can be read and extended without touching the sampling code.
Everything here is plain data; changing it changes the generated files, so bump
``GENERATOR_VERSION`` in `gsr_train.data.synthetic_config` when you do.
"""

from __future__ import annotations

from dataclasses import dataclass

# --------------------------------------------------------------------------- names
MALE_FIRST = (
    "James John Robert Michael William David Richard Joseph Thomas Charles Daniel Matthew "
    "Anthony Mark Paul Steven Andrew Joshua Kevin Brian George Edward Ronald Timothy Jason "
    "Jeffrey Ryan Jacob Gary Nicholas Eric Jonathan Stephen Larry Justin Scott Brandon "
    "Benjamin Samuel Gregory Frank Alexander Patrick Raymond Jack Dennis Jerry Tyler Aaron "
    "Henry Adam Douglas Nathan Peter Zachary Kyle Walter Harold Jeremy Ethan Carl Keith "
    "Roger Gerald Christian Terry Sean Arthur Austin Noah Lawrence Jesse Joe Bryan Billy "
    "Oscar Felix Hugo Marcus Victor Leon Ivan Rafael Mateo Luca Elias Omar Tobias"
).split()
FEMALE_FIRST = (
    "Mary Patricia Jennifer Linda Elizabeth Barbara Susan Jessica Sarah Karen Nancy Lisa "
    "Betty Margaret Sandra Ashley Kimberly Emily Donna Michelle Dorothy Carol Amanda Melissa "
    "Deborah Stephanie Rebecca Sharon Laura Cynthia Kathleen Amy Shirley Angela Helen Anna "
    "Brenda Pamela Nicole Emma Samantha Katherine Christine Debra Rachel Catherine Carolyn "
    "Janet Ruth Maria Heather Diane Virginia Julie Joyce Victoria Olivia Kelly Christina "
    "Lauren Joan Evelyn Judith Megan Cheryl Andrea Hannah Martha Jacqueline Frances Gloria "
    "Clara Greta Ingrid Sofia Lucia Elena Marta Nadia Yasmin Irene Vera Alice"
).split()
LAST = (
    "Smith Johnson Williams Brown Jones Garcia Miller Davis Rodriguez Martinez Hernandez "
    "Lopez Gonzalez Wilson Anderson Taylor Moore Jackson Martin Lee Perez Thompson White "
    "Harris Sanchez Clark Ramirez Lewis Robinson Walker Young Allen King Wright Scott Torres "
    "Nguyen Hill Flores Green Adams Nelson Baker Hall Rivera Campbell Mitchell Carter Roberts "
    "Gomez Phillips Evans Turner Diaz Parker Cruz Edwards Collins Reyes Stewart Morris Morales "
    "Murphy Cook Rogers Gutierrez Ortiz Morgan Cooper Peterson Bailey Reed Kelly Howard Ramos "
    "Kim Cox Ward Richardson Watson Brooks Chavez Wood James Bennett Gray Mendoza Ruiz Hughes "
    "Price Alvarez Castillo Sanders Patel Myers Long Ross Foster Jimenez Powell Jenkins Perry "
    "Russell Sullivan Bell Coleman Butler Henderson Barnes Fisher Vasquez Simmons Romero "
    "Jordan Patterson Alexander Hamilton Graham Reynolds Griffin Wallace Moreno West Cole "
    "Hayes Bryant Herrera Gibson Ellis Tran Medina Aguilar Stevens Murray Ford Castro Marshall "
    "Owens Harrison Fernandez Mcdonald Woods Washington Kennedy Wells Vargas Henry Chen Freeman "
    "Webb Tucker Guzman Burns Crawford Olson Simpson Porter Hunter Gordon Mendez Silva Shaw "
    "Snyder Mason Dixon Munoz Hunt Hicks Holmes Palmer Wagner Black Robertson Boyd Rose Stone "
    "Salazar Fox Warren Mills Meyer Rice Schmidt Garza Daniels Ferguson Nichols Stephens Soto "
    "Weaver Ryan Gardner Payne Grant Dunn Kelley Spencer Hawkins Arnold Pierce Vazquez Hansen "
    "Peters Santos Hart Bradley Knight Elliott Cunningham Duncan Armstrong Hudson Carroll Lane "
    "Riley Andrews Alvarado Ray Delgado Berry Perkins Hoffman Johnston Matthews Pena Richards "
    "Lindqvist Okafor Takahashi Novak Kowalski Brennan Dubois Rossi Moretti Larsen Haddad"
).split()
SYLLABLES = (
    "al an ar bel bor cal cor dan dor el en fal fen gar gel hal har is kel kor lan len mar "
    "mel mor nar nor or pel pen quel ran ros sal sel tal tor ul val ven wen yar zel bran "
    "dral fir gren mal nim oss pra rin sten tam vor wil"
).split()
CITY_SUFFIX = (
    "ton ford burg ville field port haven wood bridge stead mouth dale brook wick more cester by holm minster crest"
).split()
CITY_PREFIX = ("Port", "New", "East", "West", "North", "South", "Fort", "Lake", "Saint", "Mount")
REGION_SUFFIX = ("Province", "State", "County", "Region", "Territory")

FILM_ADJ = (
    "Silent Broken Hidden Last Golden Crimson Dark Endless Lonely Burning Frozen Wild Quiet "
    "Forgotten Secret Distant Savage Hollow Bright Fallen Midnight Iron Glass Paper Electric "
    "Velvet Scarlet Silver Bitter Sweet Restless Eternal Stolen Sacred Shattered Wandering "
    "Invisible Northern Southern Final"
).split()
FILM_NOUN = (
    "Harbor Garden River Kingdom Empire Shadow Promise Horizon Storm Winter Summer Road "
    "Letter Witness Island Mountain Voyage Frontier Circus Orchard Lighthouse Station Mirror "
    "Symphony Harvest Tide Desert Forest Crown Bridge Secret Hunter Stranger Daughter Son "
    "Widow Dancer Soldier Thief Doctor Pilot Painter Prophet Angel Ghost Machine Signal "
    "Carnival Labyrinth Compass Lantern Ember Rebellion Requiem Odyssey Paradise Crossing"
).split()
CHARACTER_TITLE = (
    "Detective Captain Doctor Agent Professor Sergeant Lady Sir Uncle Aunt Officer Judge "
    "Father Sister Colonel Coach Mayor Lieutenant Nurse Governor"
).split()
ORG_SUFFIX = (
    "Industries Group Systems Labs Motors Holdings Bank Media Foods Airlines Energy Records "
    "Pharmaceuticals Logistics Dynamics Partners Robotics Textiles Insurance Telecom"
).split()
STUDIO_SUFFIX = ("Pictures", "Studios", "Films", "Entertainment", "Productions")

# Real country names on purpose: "United States of America" is the archetypal Freebase hub.
# (country, official language, weight of its population in the world)
COUNTRIES = (
    ("United States of America", "English Language", 10.0),
    ("United Kingdom", "English Language", 3.0),
    ("France", "French Language", 3.0),
    ("Germany", "German Language", 2.5),
    ("Italy", "Italian Language", 2.0),
    ("Spain", "Spanish Language", 2.0),
    ("Canada", "English Language", 2.0),
    ("Japan", "Japanese Language", 1.5),
    ("India", "Hindi Language", 1.5),
    ("Brazil", "Portuguese Language", 1.2),
    ("Mexico", "Spanish Language", 1.2),
    ("Australia", "English Language", 1.0),
    ("Sweden", "Swedish Language", 0.8),
    ("Netherlands", "Dutch Language", 0.8),
    ("Poland", "Polish Language", 0.7),
    ("Nigeria", "English Language", 0.7),
    ("South Korea", "Korean Language", 0.7),
    ("Egypt", "Arabic Language", 0.6),
    ("Argentina", "Spanish Language", 0.6),
    ("Norway", "Norwegian Language", 0.5),
)
EXTRA_LANGUAGES = ("Russian Language", "Mandarin Chinese", "Greek Language", "Turkish Language")
GENDERS = ("Male", "Female")
PROFESSIONS = (
    "Actor",
    "Film director",
    "Screenwriter",
    "Film producer",
    "Composer",
    "Cinematographer",
    "Film editor",
    "Businessperson",
    "Politician",
    "Engineer",
    "Lawyer",
    "Physician",
    "Scientist",
    "Teacher",
    "Journalist",
    "Singer",
    "Athlete",
    "Writer",
    "Musician",
)
RELIGIONS = ("Christianity", "Islam", "Judaism", "Hinduism", "Buddhism", "Atheism")
FILM_GENRES = (
    "Drama",
    "Comedy",
    "Thriller",
    "Romance film",
    "Action film",
    "Science fiction",
    "Horror",
    "Documentary film",
    "Crime fiction",
    "Adventure film",
    "Animation",
    "Musical",
)
DEGREES = ("Bachelor of Arts", "Bachelor of Science", "Master of Arts", "Master of Science", "PhD")
JOB_TITLES = (
    "Chief Executive Officer",
    "Software engineer",
    "Accountant",
    "Sales manager",
    "Consultant",
    "Chief Financial Officer",
    "Researcher",
    "Designer",
)
UNION_TYPES = ("Marriage", "Domestic partnership")
# Entity types that hub relations point to; their entities join almost any two entities in
# two hops, so per-question graphs keep only some of their edges (see Subgrapher).
HUB_TYPES = frozenset(
    {"gender", "country", "language", "profession", "religion", "genre", "degree", "job_title", "union_type"}
)

# --------------------------------------------------------------------------- relations
# Relation ids follow Freebase (type.property). ``INVERSES`` pairs properties whose
# reverse direction Freebase also stores as its own triple; hub relations have none.
GENDER = "people.person.gender"
NATIONALITY = "people.person.nationality"
PROFESSION = "people.person.profession"
RELIGION = "people.person.religion"
LANGUAGES = "people.person.languages"
BIRTH = "people.person.place_of_birth"
BORN_HERE = "location.location.people_born_here"
DEATH = "people.deceased_person.place_of_death"
DIED_HERE = "location.location.people_who_died_here"
PARENTS = "people.person.parents"
CHILDREN = "people.person.children"
SPOUSE_S = "people.person.spouse_s"
MARRIAGE_SPOUSE = "people.marriage.spouse"
MARRIAGE_TYPE = "people.marriage.type_of_union"
MARRIAGE_PLACE = "people.marriage.location_of_ceremony"
INFLUENCED_BY = "influence.influence_node.influenced_by"
INFLUENCED = "influence.influence_node.influenced"
SIBLING_S = "people.person.sibling_s"
SIBLING = "people.sibling_relationship.sibling"
EDUCATION = "people.person.education"
EDU_STUDENT = "education.education.student"
EDU_INSTITUTION = "education.education.institution"
EDU_DEGREE = "education.education.degree"
STUDENTS = "education.educational_institution.students_graduates"
EMPLOYMENT = "people.person.employment_history"
TENURE_PERSON = "business.employment_tenure.person"
TENURE_COMPANY = "business.employment_tenure.company"
TENURE_TITLE = "business.employment_tenure.title"
EMPLOYEES = "business.employer.employees"
PLACES_LIVED = "people.person.places_lived"
LIVED_LOCATION = "people.place_lived.location"
LIVED_PERSON = "people.place_lived.person"
ACTOR_FILM = "film.actor.film"
STARRING = "film.film.starring"
PERF_ACTOR = "film.performance.actor"
PERF_FILM = "film.performance.film"
PERF_CHARACTER = "film.performance.character"
CHARACTER_PORTRAYED = "film.film_character.portrayed_in_films"
DIRECTED_BY = "film.film.directed_by"
DIRECTOR_FILM = "film.director.film"
WRITTEN_BY = "film.film.written_by"
WRITER_FILM = "film.writer.film"
PRODUCED_BY = "film.film.produced_by"
PRODUCER_FILM = "film.producer.film"
MUSIC_BY = "film.film.music"
COMPOSER_FILM = "film.music_contributor.film"
CINEMATOGRAPHY = "film.film.cinematography"
CINEMATOGRAPHER_FILM = "film.cinematographer.film"
EDITED_BY = "film.film.edited_by"
EDITOR_FILM = "film.editor.film"
FILM_GENRE = "film.film.genre"
FILM_COUNTRY = "film.film.country"
FILM_LANGUAGE = "film.film.language"
PRODUCTION_COMPANY = "film.film.production_companies"
COMPANY_FILMS = "film.production_company.films"
CONTAINEDBY = "location.location.containedby"
CONTAINS = "location.location.contains"
DIVISION_COUNTRY = "location.administrative_division.country"
COUNTRY_DIVISIONS = "location.country.administrative_divisions"
CAPITAL = "location.country.capital"
OFFICIAL_LANGUAGE = "location.country.official_language"
LANGUAGES_SPOKEN = "location.country.languages_spoken"
SPOKEN_IN = "language.human_language.countries_spoken_in"
FOUNDERS = "organization.organization.founders"
FOUNDED = "organization.organization_founder.organizations_founded"
HEADQUARTERS = "organization.organization.headquarters"
ADDRESS_CITY = "location.mailing_address.citytown"
PLACE_FOUNDED = "organization.organization.place_founded"

INVERSES = {
    BIRTH: BORN_HERE,
    DEATH: DIED_HERE,
    PARENTS: CHILDREN,
    INFLUENCED_BY: INFLUENCED,
    EDU_INSTITUTION: STUDENTS,
    TENURE_COMPANY: EMPLOYEES,
    ACTOR_FILM: PERF_ACTOR,
    STARRING: PERF_FILM,
    PERF_CHARACTER: CHARACTER_PORTRAYED,
    DIRECTED_BY: DIRECTOR_FILM,
    WRITTEN_BY: WRITER_FILM,
    PRODUCED_BY: PRODUCER_FILM,
    MUSIC_BY: COMPOSER_FILM,
    CINEMATOGRAPHY: CINEMATOGRAPHER_FILM,
    EDITED_BY: EDITOR_FILM,
    PRODUCTION_COMPANY: COMPANY_FILMS,
    CONTAINEDBY: CONTAINS,
    DIVISION_COUNTRY: COUNTRY_DIVISIONS,
    LANGUAGES_SPOKEN: SPOKEN_IN,
    FOUNDERS: FOUNDED,
    SPOUSE_S: MARRIAGE_SPOUSE,
    SIBLING_S: SIBLING,
    EDUCATION: EDU_STUDENT,
    EMPLOYMENT: TENURE_PERSON,
    PLACES_LIVED: LIVED_PERSON,
}

# Occupational roles of people: (role, profession hub, share of people); the rest of the
# people get a general profession only.
ROLES = (
    ("actor", "Actor", 0.30),
    ("director", "Film director", 0.06),
    ("writer", "Screenwriter", 0.06),
    ("producer", "Film producer", 0.05),
    ("composer", "Composer", 0.03),
    ("cinematographer", "Cinematographer", 0.03),
    ("editor", "Film editor", 0.03),
    ("founder", "Businessperson", 0.07),
)
# Film crew besides directors, writers and producers: (role, relation, share of films).
CREW = (
    ("composer", MUSIC_BY, 0.7),
    ("cinematographer", CINEMATOGRAPHY, 0.6),
    ("editor", EDITED_BY, 0.6),
)

# --------------------------------------------------------------------------- questions


@dataclass(frozen=True)
class Family:
    """One kind of question: follow ``chain`` from a topic entity of ``topic_type``.

    ``filters[k]`` = (entity type, gender) the entities reached after hop ``k`` must have
    (``None`` = any); the last filter selects the answers. ``gendered`` templates are used
    only when every answer has that gender ("who is {x}'s wife"). The topic itself is never
    an answer.
    """

    name: str
    topic_type: str
    chain: tuple[str, ...]
    templates: tuple[str, ...]
    filters: tuple[tuple[str | None, str | None], ...] = ()
    gendered: tuple[tuple[str, tuple[str, ...]], ...] = ()
    weight: float = 1.0

    @property
    def hops(self) -> int:
        return len(self.chain)


def _f(name, topic, chain, templates, filters=(), gendered=(), weight=1.0) -> Family:
    chain = tuple(chain)
    filters = tuple(filters) or tuple((None, None) for _ in chain)
    return Family(name, topic, chain, tuple(templates), filters, tuple(gendered), weight)


ANY = (None, None)
FAMILIES: tuple[Family, ...] = (
    # ---- person, 1 hop
    _f(
        "birthplace",
        "person",
        [BIRTH],
        [
            "where was {x} born",
            "what city was {x} born in",
            "where is {x} originally from",
            "what city is {x} from",
            "what is the birthplace of {x}",
        ],
    ),
    _f("deathplace", "person", [DEATH], ["where did {x} die", "what city did {x} die in", "where did {x} pass away"]),
    _f(
        "nationality",
        "person",
        [NATIONALITY],
        [
            "what country is {x} from",
            "what is {x}'s nationality",
            "what nationality is {x}",
            "what is {x}'s citizenship",
        ],
        weight=0.6,
    ),
    _f(
        "profession",
        "person",
        [PROFESSION],
        [
            "what does {x} do for a living",
            "what is {x}'s profession",
            "what was {x}'s occupation",
            "what did {x} do for work",
        ],
        weight=0.6,
    ),
    _f(
        "religion",
        "person",
        [RELIGION],
        ["what religion is {x}", "what is {x}'s religion", "what faith does {x} follow"],
        weight=0.5,
    ),
    _f(
        "languages",
        "person",
        [LANGUAGES],
        ["what languages does {x} speak", "what language does {x} speak"],
        weight=0.6,
    ),
    _f(
        "parents",
        "person",
        [PARENTS],
        ["who are {x}'s parents", "who were the parents of {x}", "who are the parents of {x}"],
        gendered=(("Female", ("who is {x}'s mother",)), ("Male", ("who is {x}'s father",))),
    ),
    _f(
        "mother",
        "person",
        [PARENTS],
        ["who is {x}'s mother", "who was the mother of {x}"],
        filters=[("person", "Female")],
        weight=0.5,
    ),
    _f(
        "children",
        "person",
        [CHILDREN],
        ["who are {x}'s children", "what are the names of {x}'s kids", "who are the children of {x}"],
        gendered=(("Female", ("who is {x}'s daughter",)), ("Male", ("who is {x}'s son",))),
    ),
    _f(
        "influences",
        "person",
        [INFLUENCED_BY],
        ["who influenced {x}", "who were {x}'s influences", "who inspired {x}"],
        weight=0.6,
    ),
    _f("influenced", "person", [INFLUENCED], ["who did {x} influence", "who was influenced by {x}"], weight=0.5),
    _f(
        "films_directed",
        "person",
        [DIRECTOR_FILM],
        ["what movies did {x} direct", "what films has {x} directed", "which movies were directed by {x}"],
    ),
    _f(
        "films_written",
        "person",
        [WRITER_FILM],
        ["what movies did {x} write", "what films did {x} write the screenplay for"],
        weight=0.7,
    ),
    _f(
        "orgs_founded",
        "person",
        [FOUNDED],
        ["what companies did {x} found", "what company did {x} start", "what business did {x} create"],
    ),
    # ---- person, 2 hops through a mediator (CVT) node
    _f(
        "spouse",
        "person",
        [SPOUSE_S, MARRIAGE_SPOUSE],
        ["who is {x} married to", "who was {x}'s spouse", "who did {x} marry"],
        filters=[ANY, ("person", None)],
        gendered=(
            ("Female", ("who is {x}'s wife", "who was {x}'s wife")),
            ("Male", ("who is {x}'s husband", "who was {x}'s husband")),
        ),
        weight=1.5,
    ),
    _f(
        "siblings",
        "person",
        [SIBLING_S, SIBLING],
        ["who are {x}'s siblings", "who are the brothers and sisters of {x}"],
        filters=[ANY, ("person", None)],
        gendered=(("Female", ("who is {x}'s sister",)), ("Male", ("who is {x}'s brother",))),
    ),
    _f(
        "education",
        "person",
        [EDUCATION, EDU_INSTITUTION],
        [
            "where did {x} go to college",
            "what university did {x} attend",
            "where did {x} study",
            "what school did {x} go to",
        ],
        weight=1.5,
    ),
    _f(
        "employer",
        "person",
        [EMPLOYMENT, TENURE_COMPANY],
        ["who does {x} work for", "what company did {x} work for", "where did {x} work", "who employed {x}"],
        weight=1.5,
    ),
    _f(
        "places_lived",
        "person",
        [PLACES_LIVED, LIVED_LOCATION],
        ["where did {x} live", "where has {x} lived", "what cities has {x} lived in"],
    ),
    _f(
        "acted_in",
        "person",
        [ACTOR_FILM, PERF_FILM],
        [
            "what movies has {x} been in",
            "what films did {x} star in",
            "what movies did {x} play in",
            "what films has {x} acted in",
        ],
        weight=1.5,
    ),
    _f(
        "wedding_place",
        "person",
        [SPOUSE_S, MARRIAGE_PLACE],
        ["where did {x} get married", "where was {x}'s wedding"],
        weight=0.6,
    ),
    # ---- person, 2 hops through named entities
    _f(
        "grandparents",
        "person",
        [PARENTS, PARENTS],
        ["who are {x}'s grandparents", "who were the grandparents of {x}"],
        weight=0.7,
    ),
    _f(
        "grandchildren",
        "person",
        [CHILDREN, CHILDREN],
        ["who are {x}'s grandchildren", "who are the grandchildren of {x}"],
        weight=0.7,
    ),
    _f(
        "parents_birthplace",
        "person",
        [PARENTS, BIRTH],
        ["where were {x}'s parents born", "where are {x}'s parents from"],
        weight=1.2,
    ),
    _f(
        "father_birthplace",
        "person",
        [PARENTS, BIRTH],
        ["where was {x}'s father born", "what city is {x}'s father from"],
        filters=[("person", "Male"), ANY],
    ),
    _f(
        "birth_region",
        "person",
        [BIRTH, CONTAINEDBY],
        ["what state was {x} born in", "what region was {x} born in", "what province is {x} from"],
        filters=[ANY, ("region", None)],
        weight=1.2,
    ),
    _f(
        "birth_country",
        "person",
        [BIRTH, CONTAINEDBY],
        ["what country was {x} born in", "in which country was {x} born"],
        filters=[ANY, ("country", None)],
        weight=0.7,
    ),
    # ---- film
    _f(
        "director",
        "film",
        [DIRECTED_BY],
        ["who directed {x}", "who is the director of {x}", "who was the director of the movie {x}"],
        weight=1.2,
    ),
    _f("writer", "film", [WRITTEN_BY], ["who wrote {x}", "who wrote the screenplay for {x}"]),
    _f("producer", "film", [PRODUCED_BY], ["who produced {x}", "who was the producer of {x}"], weight=0.7),
    _f(
        "composer",
        "film",
        [MUSIC_BY],
        ["who composed the music for {x}", "who wrote the music for {x}", "who did the score of {x}"],
        weight=0.6,
    ),
    _f("cinematographer", "film", [CINEMATOGRAPHY], ["who was the cinematographer of {x}", "who shot {x}"], weight=0.4),
    _f("editor", "film", [EDITED_BY], ["who edited {x}", "who was the film editor of {x}"], weight=0.4),
    _f(
        "genre",
        "film",
        [FILM_GENRE],
        ["what genre is {x}", "what kind of movie is {x}", "what type of film is {x}"],
        weight=0.6,
    ),
    _f("film_language", "film", [FILM_LANGUAGE], ["what language is {x} in"], weight=0.4),
    _f(
        "film_country", "film", [FILM_COUNTRY], ["what country is the movie {x} from", "where was {x} made"], weight=0.4
    ),
    _f(
        "studio",
        "film",
        [PRODUCTION_COMPANY],
        ["what studio made {x}", "what company produced {x}", "which studio released {x}"],
        weight=0.8,
    ),
    _f(
        "cast",
        "film",
        [STARRING, PERF_ACTOR],
        ["who starred in {x}", "who acted in {x}", "who is in the cast of {x}", "who played in {x}"],
        filters=[ANY, ("person", None)],
        weight=1.5,
    ),
    _f(
        "director_birthplace",
        "film",
        [DIRECTED_BY, BIRTH],
        ["where was the director of {x} born", "what city is the director of {x} from"],
        weight=1.2,
    ),
    _f(
        "director_other_films",
        "film",
        [DIRECTED_BY, DIRECTOR_FILM],
        ["what other movies did the director of {x} make", "what other films were made by the director of {x}"],
        weight=0.8,
    ),
    _f("writer_nationality", "film", [WRITTEN_BY, NATIONALITY], ["what nationality is the writer of {x}"], weight=0.4),
    # ---- places
    _f(
        "city_region",
        "city",
        [CONTAINEDBY],
        ["what state is {x} in", "what region is {x} in", "what province is {x} located in"],
        filters=[("region", None)],
    ),
    _f(
        "city_country",
        "city",
        [CONTAINEDBY],
        ["what country is {x} in", "where is {x} located"],
        filters=[("country", None)],
        weight=0.6,
    ),
    _f("born_in_city", "city", [BORN_HERE], ["who was born in {x}", "what famous people are from {x}"], weight=0.5),
    _f(
        "companies_in_city",
        "city",
        ["~" + ADDRESS_CITY, "~" + HEADQUARTERS],
        ["what companies are based in {x}", "which companies have their headquarters in {x}"],
        weight=0.5,
    ),
    _f(
        "region_country",
        "region",
        [CONTAINEDBY],
        ["what country is {x} in", "where is {x}"],
        filters=[("country", None)],
        weight=0.5,
    ),
    _f(
        "region_cities",
        "region",
        [CONTAINS],
        ["what cities are in {x}", "what are the main cities in {x}"],
        filters=[("city", None)],
        weight=0.4,
    ),
    _f("capital", "country", [CAPITAL], ["what is the capital of {x}", "what is {x}'s capital city"], weight=0.4),
    _f(
        "country_languages",
        "country",
        [LANGUAGES_SPOKEN],
        ["what languages are spoken in {x}", "what language do they speak in {x}"],
        weight=0.4,
    ),
    _f(
        "university_city",
        "university",
        [CONTAINEDBY],
        ["where is {x} located", "what city is {x} in"],
        filters=[("city", None)],
        weight=0.7,
    ),
    # ---- organisations
    _f("founders", "org", [FOUNDERS], ["who founded {x}", "who started {x}", "who are the founders of {x}"]),
    _f(
        "headquarters",
        "org",
        [HEADQUARTERS, ADDRESS_CITY],
        ["where is {x} headquartered", "where is {x} based", "what city is {x} located in"],
        weight=1.2,
    ),
    _f(
        "employees",
        "org",
        [EMPLOYEES, TENURE_PERSON],
        ["who works for {x}", "who has worked at {x}"],
        filters=[ANY, ("person", None)],
        weight=0.8,
    ),
    _f("founder_birthplace", "org", [FOUNDERS, BIRTH], ["where was the founder of {x} born"], weight=0.8),
    _f("studio_films", "org", [COMPANY_FILMS], ["what movies did {x} produce", "what films did {x} make"], weight=0.5),
)

# A "~" prefix on a chain step means: walk the relation backwards (tail -> head); used only
# where Freebase has no reverse property (mailing addresses).

# Two-topic questions: the answer is the intersection of what two chains reach.
CHARACTER_TEMPLATES = ("who played {c} in {x}", "who plays {c} in {x}", "who was {c} in {x}")
DIRECTOR_ACTOR_TEMPLATES = (
    "which film did {a} direct that starred {b}",
    "what movie directed by {a} starred {b}",
    "what film did {b} make with director {a}",
)
COSTAR_TEMPLATES = (
    "what movie did {a} and {b} star in together",
    "which film starred both {a} and {b}",
    "what movies have {a} and {b} been in together",
)
COUPLE_CHILD_TEMPLATES = (
    "who is the child of {a} and {b}",
    "what are the names of {a} and {b}'s children",
)
