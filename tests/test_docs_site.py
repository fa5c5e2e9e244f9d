"""The manual (mkdocs.yml, docs/): a reference entry for every public name, benchmark pages that match
results/, a short README; in the slow suite, the site built strictly and opened in headless Chromium."""

from __future__ import annotations

import functools
import http.server
import importlib
import json
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import bench_pages  # noqa: E402

PACKAGES = ("chunkstore", "sb3_integration")
#: public modules beyond the packages' top level (the seams), rendered whole or name by name
SEAM_MODULES = ("chunkstore.abc", "chunkstore.validate", "chunkstore.testing.codecs", "sb3_integration.abc",
                "sb3_integration.samplers")
README_MAX_LINES = 250


def reference_entries() -> set[str]:
    """The names the API reference pages render (mkdocstrings' ``::: name`` lines)."""
    found = set()
    for page in (ROOT / "docs" / "reference").glob("*.md"):
        found |= set(re.findall(r"^::: ([\w.]+)\s*$", page.read_text(), re.M))
    return found


def where(pkg: str, name: str) -> str:
    """The entry a public name is rendered under: its home module for sb3_integration, whose names load
    lazily (PEP 562) and so are found by mkdocstrings' static analysis only there."""
    module = importlib.import_module(pkg)
    home = getattr(module, "_HOME", {}).get(name)
    return f"{pkg}.{home}.{name}" if home else f"{pkg}.{name}"


def test_every_public_name_has_a_reference_entry():
    entries = reference_entries()
    public = {where(pkg, name) for pkg in PACKAGES for name in importlib.import_module(pkg).__all__}
    seams = set(SEAM_MODULES) | {f"{m}.{name}" for m in SEAM_MODULES
                                 for name in getattr(importlib.import_module(m), "__all__", ())}
    for m in SEAM_MODULES:
        assert any(e == m or e.startswith(f"{m}.") for e in entries), f"{m} has no entry in docs/reference"
    entries -= seams
    assert not public - entries, f"not in docs/reference/*.md: {sorted(public - entries)}"
    # an entry for a name that is not public any more would fail the strict build or mislead
    assert not entries - public, f"docs/reference/*.md renders non-public names: {sorted(entries - public)}"


def test_the_reference_pages_are_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in (ROOT / "docs" / "reference").glob("*.md"):
        assert f"reference/{page.name}" in nav, page.name


def test_the_benchmark_pages_match_the_results():
    stale = bench_pages.differences(bench_pages.expected())
    assert not stale, f"run python tools/bench_pages.py: {stale[:5]}"


def test_a_benchmark_page_says_what_a_result_does_not_record(tmp_path):
    bare = tmp_path / "bench_nothing_recorded.json"
    bare.write_text(json.dumps({"rows": [{"arm": "ours", "ms": 1.5}, {"arm": "sb3", "ms": 2.0}]}))
    text, facts = bench_pages.page(bare)
    assert facts == {"command": "not recorded", "machine": "not recorded", "date": "not recorded"}
    assert "| command | not recorded |" in text and "| date | not recorded |" in text
    assert "| ours | 1.5 |" in text  # the rows come from the JSON itself


def test_a_benchmark_page_shows_the_recorded_command_machine_and_date(tmp_path):
    result = tmp_path / "bench_recorded.json"
    result.write_text(json.dumps({"env": {"time": "2026-01-02T03:04:05+0000", "machine": "x86_64", "cpu_count": 2,
                                          "python": "3.11.7", "argv": ["tools/bench_x.py", "--out", "r.json"]},
                                  "rows": []}))
    _, facts = bench_pages.page(result)
    assert facts == {"command": "python tools/bench_x.py --out r.json",
                     "machine": "x86_64, 2 CPUs, Python 3.11.7", "date": "2026-01-02T03:04:05+0000"}


def test_the_readme_is_short_and_links_into_the_manual():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    for target in re.findall(r"\]\(((?:docs/|CHANGELOG)[^)#]*)", text):
        assert (ROOT / target).is_file(), f"README links to {target}, which does not exist"


def test_ci_runs_the_readme_test_command_and_the_strict_build():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test\n" in ci and "make docs" in ci
    assert "make test " in (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^docs:.*\n(\t.*\n)*\t.*mkdocs build --strict", makefile, re.M)


# -- the built site in a real browser (slow) -----------------------------------------------------

def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _dump_dom(browser: str, url: str, profile: Path) -> str:
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--virtual-time-budget=5000", "--dump-dom", url],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.slow
def test_the_manual_builds_strictly_and_renders_in_chromium(tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium (CI installs Debian's package: .ci/run)")
    site = tmp_path / "site"
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                           cwd=ROOT, capture_output=True, text=True, timeout=600,
                           env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stderr[-4000:]
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        home = _dump_dom(browser, f"{base}/", tmp_path / "profile-home")
        api = _dump_dom(browser, f"{base}/reference/buffers/", tmp_path / "profile-api")
    finally:
        server.shutdown()
    for dom in (home, api):
        assert 'class="md-nav md-nav--primary"' in dom, dom[:2000]   # the navigation
        assert 'class="md-search__input"' in dom, dom[:2000]        # the search box
        assert "API reference" in dom and "User guide" in dom        # the nav's sections
    assert "<h1" in home and "Replay storage for reinforcement learning" in home
    # mkdocstrings rendered the class (at its home module: see where() above)
    assert 'id="sb3_integration.buffers.replay.CompressedReplayBuffer"' in api
    assert "sample" in api and "Parameters" in api


def test_the_reference_shows_sphinx_roles_as_code():
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    import sphinx_roles
    assert sphinx_roles.plain("a :class:`~chunkstore.Tier` or :meth:`save`") == "a `Tier` or `save`"
    assert sphinx_roles.plain(":mod:`sb3_integration.interop`, :func:`x <chunkstore.get_codec>`") == \
        "`sb3_integration.interop`, x (`chunkstore.get_codec`)"
