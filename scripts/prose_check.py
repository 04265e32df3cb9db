"""Sentences in the docs longer than a breath: more than MAX_WORDS words.

    python scripts/prose_check.py README.md docs/defaults.md

Prints each long sentence with its file, line and length; exits 1 if there is one. Code blocks,
tables and headings are skipped, and so are link targets.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

MAX_WORDS = 40
# A sentence ends at . ! or ? (and any closing bracket or quote) followed by a space.
SENTENCE_END = re.compile(r"(?<=[.!?])[)\"'”’]*\s+")


def prose_blocks(text: str) -> list[tuple[int, str]]:
    """(first line, text) of each paragraph or list item outside code blocks, tables and headings."""
    blocks: list[tuple[int, str]] = []
    current: list[str] = []
    start, fenced = 0, False

    def close() -> None:
        if current:
            blocks.append((start, " ".join(current)))
            current.clear()

    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            close()
            fenced = not fenced
            continue
        if fenced or not stripped or stripped.startswith(("|", "#", "<")) or line.startswith("    "):
            close()
            continue
        if re.match(r"([-*]|\d+\.)\s", stripped):  # a list item starts a block of its own
            close()
        if not current:
            start = number
        current.append(stripped)
    close()
    return blocks


def words(sentence: str) -> int:
    return len(re.sub(r"\]\([^)]*\)", "]", sentence).split())  # a link counts by its text


def long_sentences(text: str, limit: int = MAX_WORDS) -> list[tuple[int, int, str]]:
    """(line, words, sentence) for each sentence over ``limit`` words."""
    found = []
    for line, block in prose_blocks(text):
        for sentence in SENTENCE_END.split(block):
            if words(sentence) > limit:
                found.append((line, words(sentence), sentence))
    return found


def main(paths: list[str]) -> int:
    failed = 0
    for path in paths:
        for line, count, sentence in long_sentences(Path(path).read_text(encoding="utf-8")):
            print(f"{path}:{line}: {count} words: {sentence}")
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
