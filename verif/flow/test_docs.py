"""The docs read as a manual: short pages, no history in any tracked file, links that resolve.
(The numbers in them are checked by test_figures.)"""
import re
import subprocess

import pytest

from vrex.figures import ROOT

GENERATED = {"docs/registers.md"}


def _tracked(*patterns):
    out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True,
                         text=True)
    if out.returncode:
        pytest.skip("not a git checkout")
    return [rel for rel in out.stdout.split() if (ROOT / rel).is_file()]


def test_readme_is_a_manual():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines (at most 150)"
    long = [i + 1 for i, x in enumerate(lines) if len(x) > 120]
    assert not long, f"README.md lines over 120 characters: {long}"


def test_every_page_is_short():
    for rel in _tracked("docs/*.md"):
        if rel not in GENERATED:
            n = len((ROOT / rel).read_text().splitlines())
            assert n <= 300, f"{rel} has {n} lines (at most 300)"


def test_no_history_markers():
    """Comments and docs say what is; when it changed is in git. (pytest's fixture scope of
    that name is the one use of the word.)"""
    bad = []
    for rel in _tracked():
        if rel.endswith((".npz", ".png")):
            continue
        for i, line in enumerate((ROOT / rel).read_text(errors="ignore").splitlines()):
            if re.search(r"\bsession\b", line, re.I) and 'scope="session"' not in line:
                bad.append(f"{rel}:{i + 1}")
    assert not bad, "history markers: " + ", ".join(bad[:20])


def test_relative_links_resolve():
    bad = []
    for rel in ["README.md", *_tracked("docs/*.md")]:
        base = (ROOT / rel).parent
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", (ROOT / rel).read_text()):
            if not (base / target).exists():
                bad.append(f"{rel} -> {target}")
    assert not bad, f"broken links: {bad}"


def test_nothing_refers_outside_the_repository():
    bad = [rel for rel in _tracked("*.md", "*.py")
           if re.search(r"\.\./shared|DESIGN\.md", (ROOT / rel).read_text())
           and rel != "verif/flow/test_docs.py"]
    assert not bad, f"files that refer outside the repository: {bad}"
