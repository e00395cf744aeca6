"""Small generated corpora with enough structure that an MLM can learn them in seconds."""

import random
from pathlib import Path

NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]
VERBS = ["sees", "likes", "finds", "paints", "buys", "sells", "moves", "keeps"]
ADJS = ["red", "blue", "green", "small", "large", "old", "new", "bright"]
NOUNS = ["house", "river", "garden", "window", "table", "boat", "lamp", "book"]
NUMBERS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def sentence(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.6:
        a = rng.randrange(len(ADJS))
        return f"{rng.choice(NAMES)} {rng.choice(VERBS)} the {ADJS[a]} {NOUNS[a]} near the {rng.choice(NOUNS)} ."
    if kind < 0.85:
        i = rng.randrange(len(NUMBERS) - 3)
        return "counting " + " ".join(NUMBERS[i : i + 4]) + " and then stop ."
    return f"the {rng.choice(NOUNS)} is {rng.choice(ADJS)} today ."


def write_corpus(path: Path, docs: int = 120, seed: int = 0, sentences=(3, 9)) -> Path:
    rng = random.Random(seed)
    blocks = []
    for _ in range(docs):
        n = rng.randint(*sentences)
        blocks.append("\n".join(sentence(rng) for _ in range(n)))
    path.write_text("\n\n".join(blocks) + "\n")
    return path
