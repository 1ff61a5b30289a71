"""What ``pip install soloist`` gets: the sdist and the wheel built from the checkout (the
sdist first, the wheel from the sdist, as ``python -m build`` does for a release), and
their metadata as PyPI shows it."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest
import trove_classifiers

import soloist

ROOT = Path(__file__).resolve().parents[2]
URLS = ("Homepage", "Documentation", "Source", "Issues", "Changelog")


class Dist:
    def __init__(self, wheel: Path, sdist: Path) -> None:
        self.wheel = wheel
        self.sdist = sdist
        with zipfile.ZipFile(wheel) as zf:
            self.wheel_files = zf.namelist()
            info = next(n for n in self.wheel_files if n.endswith(".dist-info/METADATA"))
            self.metadata: Message = Parser().parsestr(zf.read(info).decode())
        with tarfile.open(sdist) as tf:
            self.sdist_files = [name.split("/", 1)[1] for name in tf.getnames() if "/" in name]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    (wheel,) = out.glob("soloist-*.whl")
    (sdist,) = out.glob("soloist-*.tar.gz")
    return Dist(wheel, sdist)


def test_the_version_is_the_packages_own(dist: Dist) -> None:
    """One version, soloist.__version__, in the wheel, the sdist's name and the CLI."""
    assert dist.metadata["Version"] == soloist.__version__
    assert dist.wheel.name.startswith(f"soloist-{soloist.__version__}-")
    assert dist.sdist.name == f"soloist-{soloist.__version__}.tar.gz"
    shown = subprocess.run(
        [str(Path(sys.executable).parent / "soloist"), "--version"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert shown.stdout.strip().endswith(f"version {soloist.__version__}"), shown


def test_the_license_is_spdx_and_shipped(dist: Dist) -> None:
    """License-Expression: MIT, and the LICENSE file inside the wheel and the sdist."""
    assert dist.metadata["License-Expression"] == "MIT"
    assert dist.metadata.get_all("License-File") == ["LICENSE"]
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in dist.wheel_files)
    assert "LICENSE" in dist.sdist_files and "CHANGELOG.md" in dist.sdist_files
    assert "MIT License" in (ROOT / "LICENSE").read_text(encoding="utf-8")


def test_the_project_urls_and_classifiers(dist: Dist) -> None:
    """PyPI's sidebar: the project URLs, all absolute (the docs site and the repository of
    mkdocs.yml); the classifiers, all known to PyPI, name the status, the frameworks and
    the topic."""
    urls = dict(u.split(", ", 1) for u in dist.metadata.get_all("Project-URL") or [])
    assert sorted(urls) == sorted(URLS)
    assert all(u.startswith("https://") for u in urls.values()), urls
    mkdocs = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert f"\nsite_url: {urls['Documentation']}\n" in mkdocs
    assert f"\nrepo_url: {urls['Source']}\n" in mkdocs
    classifiers = dist.metadata.get_all("Classifier") or []
    unknown = set(classifiers) - trove_classifiers.classifiers
    assert not unknown, f"PyPI refuses unknown classifiers: {unknown}"
    for wanted in (
        "Development Status :: 4 - Beta",
        "Framework :: AsyncIO",
        "Framework :: Django",
        "Topic :: System :: Distributed Computing",
        "Typing :: Typed",
    ):
        assert wanted in classifiers


def test_the_extras_are_for_users_only(dist: Dist) -> None:
    """The published extras are the drivers, the HTTP endpoint and the conformance suite:
    no `dev` extra; psycopg without a binary choice made for the application; tzdata on
    every platform."""
    extras = set(dist.metadata.get_all("Provides-Extra") or [])
    assert {"postgres", "redis", "etcd", "http", "testing"} <= extras
    assert "dev" not in extras
    requires = dist.metadata.get_all("Requires-Dist") or []
    postgres = [r for r in requires if r.endswith("extra == 'postgres'")]
    assert sorted(r.split("<")[0].split(">")[0] for r in postgres) == ["psycopg", "psycopg-pool"]
    assert not any("binary" in r for r in requires), requires
    assert any(r.startswith("tzdata") and ";" not in r for r in requires), requires


def test_the_wheel_holds_the_library_and_its_data_only(dist: Dist) -> None:
    """The wheel has the dashboard page, the Lua scripts and py.typed, and neither the
    benchmark (soloist_bench) nor the tests."""
    files = set(dist.wheel_files)
    assert {"soloist/py.typed", "soloist/http/dashboard.html", "soloist/cli.py"} <= files
    assert any(f.startswith("soloist/stores/redis/lua/") for f in files)
    tops = {f.split("/", 1)[0] for f in files}
    assert tops == {"soloist", f"soloist-{soloist.__version__}.dist-info"}, tops


def test_a_missing_psycopg_binding_says_how_to_install_one(tmp_path: Path) -> None:
    """soloist[postgres] leaves psycopg's libpq binding to the application: when the one
    psycopg must use is not installed (here the C one, PSYCOPG_IMPL=c), opening a
    PostgreSQL store says what to install, in one line, exit 2."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / "soloist"), "status"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
        env={
            **os.environ,
            "PSYCOPG_IMPL": "c",
            "SOLOIST_STORE_URL": "postgresql://127.0.0.1:5432/test",
        },
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: store URL scheme 'postgresql' needs psycopg 3"), line
    assert "pip install 'soloist[postgres]' 'psycopg[binary]'" in line, line
    assert "psycopg 'c' implementation" in line, line
