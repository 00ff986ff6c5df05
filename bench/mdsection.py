"""Sections of a Markdown file owned by different benchmarks.

docs/benchmarks.md collects several benchmarks' tables; each script rewrites
only its own section, between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`,
and appends it when the file has none yet, so running one benchmark never
erases another's results."""
from pathlib import Path


def replace_section(path: Path, name: str, heading: str, body: str) -> None:
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{start}\n{heading}\n\n{body.rstrip()}\n{end}\n"
    text = path.read_text() if path.exists() else ""
    if start in text and end in text:
        before, rest = text.split(start, 1)
        after = rest.split(end, 1)[1].lstrip("\n")
        text = before + block + ("\n" + after if after else "")
    else:
        text = text.rstrip() + ("\n\n" if text.strip() else "") + block
    path.write_text(text)
