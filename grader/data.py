"""Words to learn from, and the lecture's (context -> next character) dataset built from them.

The default words are the US census first names that the `names` package ships (public domain), so
the notebook runs offline with no file of the user's; a course can point course.yml at any text
file with one word per line, such as the lecture's names.txt.
"""
from __future__ import annotations

import importlib.resources
import random
from pathlib import Path

import torch

CENSUS_FILES = ("dist.male.first", "dist.female.first")


def census_first_names() -> list[str]:
    root = importlib.resources.files("names")
    words = set()
    for name in CENSUS_FILES:
        for line in root.joinpath(name).read_text().splitlines():
            if line.strip():
                words.add(line.split()[0].lower())
    return sorted(words)


def load_words(path: str | Path | None = None) -> list[str]:
    """One lowercase word per line from `path`, or the census first names when no path is given."""
    if path is None:
        return census_first_names()
    text = Path(path).read_text(encoding="utf-8")
    words = [w.strip().lower() for w in text.splitlines() if w.strip()]
    if not words:
        raise ValueError(f"{path}: no words in the file")
    return words


def vocabulary(words: list[str]) -> tuple[dict[str, int], dict[int, str]]:
    """'.' is index 0 and marks both the start and the end of a word, as in the lecture."""
    chars = sorted(set("".join(words)))
    stoi = {ch: i + 1 for i, ch in enumerate(chars)}
    stoi["."] = 0
    return stoi, {i: ch for ch, i in stoi.items()}


def build_dataset(words: list[str], stoi: dict[str, int], block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    X, Y = [], []
    for w in words:
        context = [0] * block_size
        for ch in w + ".":
            ix = stoi[ch]
            X.append(context)
            Y.append(ix)
            context = context[1:] + [ix]
    return torch.tensor(X), torch.tensor(Y)


def splits(words: list[str], block_size: int, seed: int = 42):
    """The lecture's 80/10/10 train/dev/test split of a seeded shuffle of the words."""
    words = list(words)
    random.Random(seed).shuffle(words)
    stoi, itos = vocabulary(words)
    n1, n2 = int(0.8 * len(words)), int(0.9 * len(words))
    return (
        build_dataset(words[:n1], stoi, block_size),
        build_dataset(words[n1:n2], stoi, block_size),
        build_dataset(words[n2:], stoi, block_size),
        stoi,
        itos,
    )
