"""The README stays a short entry point; the reference in docs/ builds without a broken link."""

import re
import shutil
import tomllib
from pathlib import Path

import pytest
import yaml
from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.exceptions import Abort

from tests.helpers.paths import ROOT, script_module

README = ROOT / "README.md"
README_MAX_LINES = 200


def build_site(config_file: Path, site_dir: Path) -> None:
    """`mkdocs build --strict` in-process: raises mkdocs' Abort when anything warns."""
    build(load_config(str(config_file), strict=True, site_dir=str(site_dir)))


def nav_pages() -> list[str]:
    """The pages named in mkdocs.yml's nav (one level: a title and its page each), in order."""
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    return [page for entry in nav for page in entry.values()]


def test_every_page_in_docs_is_in_the_nav():
    assert sorted(nav_pages()) == sorted(p.name for p in (ROOT / "docs").glob("*.md"))


def test_the_site_builds_strictly_with_every_page(tmp_path):
    build_site(ROOT / "mkdocs.yml", tmp_path)
    for page in nav_pages():
        html_page = tmp_path / ("index.html" if page == "index.md" else f"{page[:-3]}/index.html")
        assert html_page.is_file(), f"{page} was not built"


@pytest.mark.parametrize(
    ("appended", "extra_page", "warning"),
    [
        ("[a section](running.md#no-such-section)", None, "does not contain an anchor"),
        ("[a page](no-such-page.md)", None, "not found among documentation files"),
        ("", "orphan.md", "orphan.md"),
    ],
    ids=["missing anchor", "missing page", "page left out of nav"],
)
def test_a_broken_link_or_a_page_left_out_fails_the_build(
    tmp_path, caplog, appended, extra_page, warning
):
    """The validation settings in mkdocs.yml are what make these fail under --strict."""
    shutil.copy(ROOT / "mkdocs.yml", tmp_path)
    docs = shutil.copytree(ROOT / "docs", tmp_path / "docs")
    with (docs / "index.md").open("a") as index:
        index.write(f"\n{appended}\n")
    if extra_page:
        (docs / extra_page).write_text("# Not in the nav\n")
    with pytest.raises(Abort, match="in strict mode"):
        build_site(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert warning in caplog.text


def test_the_readme_is_short_and_names_the_two_commands():
    readme = README.read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    assert "make run" in readme
    assert "make test" in readme


def test_every_relative_link_in_the_readme_exists():
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [t for t in targets if "://" not in t]
    assert any(t.startswith("docs/") for t in local)
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"


def contract_layers() -> list[str]:
    """The ``layers`` of pyproject.toml's import contract, without the ``tntrun.`` prefix."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in config["contracts"] if c["id"] == "layers"]
    return [layer.replace("tntrun.", "") for layer in layers]


def test_the_layers_in_development_md_are_the_import_contracts():
    text = (ROOT / "docs" / "development.md").read_text()
    block = text.split("### Layers", 1)[1].split("```", 2)[1]
    documented = [
        re.split(r"\s{2,}", line.strip())[0] for line in block.splitlines() if line[:1].strip()
    ]
    assert documented == contract_layers(), "docs/development.md's Layers block: update it"


def test_the_layout_in_development_md_is_made_from_the_docstrings():
    """Each module's docstring says what it is for; the Layout block is made from them."""
    doc = script_module("development_doc")
    current = doc.DOC.read_text()
    assert doc.with_block(current, doc.layout_block()) == current, (
        "docs/development.md's Layout block is stale: python scripts/development_doc.py"
    )


def test_a_module_without_a_docstring_shows_as_a_bare_name(tmp_path):
    """The generator reads docstrings, not the doc's old text: the check can fail."""
    doc = script_module("development_doc")
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text('"""A package. More."""\n')
    (package / "said.py").write_text('"""What it is for (Smith et al. 2020). Details."""\n')
    (package / "silent.py").write_text("x = 1\n")
    lines = doc.package_lines(package, 0)
    assert lines[0].split() == ["pkg/", "A", "package"]
    assert "What it is for (Smith et al. 2020)" in lines[1]
    assert lines[2].strip() == "silent.py"
