"""Fingerprints of the rule table's slips on the self-check's own batches, so that a student's
environment without the rule table still names a slip in the grader's words.

The rule table (grader.derive) writes every reference answer from the forward lines, so it stays out of
backprop-ninja-student, the package a graded course's students install. What the self-check needs of it
is only whether an answer equals a slip on the batches it draws itself, which are public and the same
everywhere (they come from a fixed salt). `course init` computes each slip there once and writes its
fingerprint beside the notebook: the tensor's shape, its L2 norm and its dot products with a few fixed
vectors of random signs. An answer within allclose of the slip differs from it by at most atol + rtol *
|slip| per entry; along a direction of random signs such differences add up like a random walk, to a few
times atol * sqrt(numel) + rtol * L2, never near the sum of the bounds, which no realistic answer
reaches (an answer allclose to a slip equals it up to rounding). So the test is loose enough for a slip
computed in another order and tight enough to tell a slip from one that differs in a single entry. A
few numbers per tensor give back no reference answer (the right answer's own fingerprint is there too,
to tell a torch that draws other batches, which autograd gives any student anyway).

The sentences are sealed: each is XORed with a key stream drawn from the slip's own values (their
products with another set of random signs, to six digits, which the file does not hold), so the file
lists no mistake's words, and some of them would hint at a right formula ("keeps only one factor of the
sigmoid's derivative r * (1 - r)"); an answer that is the slip opens its sentence, as the grader would
have said it. That is all the seal protects against: reading the file. A slip is, by construction, a small
edit of the right answer, which any student has through autograd, so a student who tries the usual edits of
it (a dropped factor, a missed sum, a transpose) opens the sentences of those slips; on the lecture's
exercise one-edit guesses around the right answer opened 383 of the file's 1,836 sentences. No sentence is
a reference answer, and none says more than the grader says to a student who makes that slip.

Where the table has no fingerprint (the notebook's own batch, a torch whose batches differ, no file), a
slip is unknown there: neither named nor ruled out by that batch.
"""
from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

import torch

FILE = "self_check_slips.json"
FORMAT = 1
PROJECTIONS = 4
SIGMAS = 6.0


@functools.lru_cache(maxsize=128)
def _signs(numel: int, seed: int = 20261202) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 2, (PROJECTIONS, numel), generator=g) * 2 - 1).to(torch.float64)


def _key(tensor: torch.Tensor) -> bytes:
    flat = tensor.detach().reshape(-1).to(torch.float64)
    products = _signs(flat.numel(), 20261203) @ flat
    return hashlib.sha256(" ".join(f"{float(v):.6g}" for v in products).encode()).digest()


def _stream(key: bytes, size: int) -> bytes:
    blocks = (hashlib.sha256(key + i.to_bytes(4, "big")).digest() for i in range(size // 32 + 1))
    return b"".join(blocks)[:size]


def seal(sentence: str, tensor: torch.Tensor) -> str:
    """`sentence`, readable only with `tensor`'s values (hex; its first four bytes check the key)."""
    key = _key(tensor)
    data = hashlib.sha256(key + b"check").digest()[:4] + sentence.encode()
    return bytes(a ^ b for a, b in zip(data, _stream(key, len(data)), strict=True)).hex()


def unseal(sealed: str, tensor: torch.Tensor) -> str | None:
    key = _key(tensor)
    raw = bytes.fromhex(sealed)
    data = bytes(a ^ b for a, b in zip(raw, _stream(key, len(raw)), strict=True))
    if data[:4] != hashlib.sha256(key + b"check").digest()[:4]:
        return None
    return data[4:].decode(errors="replace")


def fingerprint(tensor: torch.Tensor) -> dict:
    flat = tensor.detach().reshape(-1).to(torch.float64)
    # Twelve digits: far finer than any tolerance a fingerprint is matched with, and a third of the file.
    return {"shape": list(tensor.shape), "l2": float(f"{float(flat.norm()):.12g}"),
            "p": [float(f"{float(v):.12g}") for v in _signs(flat.numel()) @ flat]}


def matches(print_: dict, got: torch.Tensor, rtol: float, atol: float) -> bool:
    """Whether `got` is allclose to the fingerprinted tensor, as far as its products tell."""
    if list(got.shape) != print_["shape"]:
        return False
    flat = got.detach().reshape(-1).to(torch.float64)
    if not bool(torch.isfinite(flat).all()):
        return False
    products = _signs(flat.numel()) @ flat
    # The random walk of allclose's bounds, plus the rounding of sums of numel terms in float64.
    spread = atol * flat.numel() ** 0.5 + rtol * print_["l2"]
    bound = SIGMAS * spread + 1e-12 * flat.numel() ** 0.5 * (print_["l2"] + float(flat.norm()))
    return all(abs(float(a) - b) <= bound for a, b in zip(products, print_["p"], strict=True))


class Table:
    """One exercise's fingerprints: per grade id and check, its slips' keys in the order the grader tries
    them; per case name, grade id and check, the right answer's fingerprint and each slip's, with its
    sealed sentence."""

    def __init__(self, data: dict):
        self.spec, self.keys, self.cases = data["spec"], data["slips"], data["cases"]

    def slips(self, case, answer, check: str) -> list[tuple[str, dict | None]]:
        """The slips of this answer and check, each with its fingerprint on `case`, or None where the table
        cannot vouch for it there: a case it was not made on, or one whose right answer differs here."""
        keys = self.keys.get(answer.grade_id, {}).get(check, ())
        made = self.cases.get(case.config.name, {}).get(answer.grade_id, {}).get(check)
        if made is None or not matches(made["expected"], case.expected(answer, check), 1e-9, 1e-12):
            made = {"prints": {}}
        return [(key, made["prints"].get(key)) for key in keys]


@functools.lru_cache(maxsize=8)
def _read(path: str, mtime: float) -> Table | None:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return Table(data) if data.get("format") == FORMAT else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # a damaged file names no slip; it never stops a check


def table(spec: str, folder: Path | None = None) -> Table | None:
    """The fingerprints beside the notebook (the working directory) for the exercise `spec`, if any."""
    path = (folder or Path.cwd()) / FILE
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return None
    found = _read(str(path), mtime)
    return found if found is not None and found.spec == spec else None

