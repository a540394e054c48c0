"""The build backend of the compactd client: PEP 517 (wheel, sdist) and
PEP 660 (editable) hooks, in the standard library alone.

pyproject.toml names it with `backend-path`, and it requires nothing, so
`pip install ./clients/python` works offline in a fresh virtual
environment of any Python >= 3.9: pip has nothing to download before it
builds. A setuptools backend would need setuptools (and wheel) from an
index, or already installed with --no-build-isolation; Python 3.12 and
later no longer put setuptools in a new venv. RATIONALE.md has the
reasons.

The package is pure Python with no dependencies, so its wheel is
py3-none-any: the package's files, and a .dist-info with METADATA, WHEEL
and RECORD (PEP 427). The metadata is here, in METADATA_FIELDS; the
version is compactd/__init__.py's __version__, so it is written once.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile

NAME = "compactd"
PACKAGE = "compactd"
METADATA_FIELDS = [
    ("Summary", "Client for compactd, the local daemon that compacts LLM conversations"),
    ("Requires-Python", ">=3.9"),
    ("Classifier", "Programming Language :: Python :: 3"),
    ("Classifier", "Typing :: Typed"),
    ("Description-Content-Type", "text/markdown"),
]
# What an sdist carries besides the package: enough to build from it.
SDIST_FILES = ["pyproject.toml", "README.md", "_build/compactd_build.py"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Zip and tar entries get this time, so that a build is reproducible
# (SOURCE_DATE_EPOCH, as reproducible-builds.org defines it, wins).
EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))  # 1980-01-01


def version():
    """The package's __version__, read from its source without importing it."""
    with open(os.path.join(ROOT, PACKAGE, "__init__.py"), encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M)
    if not m:
        raise RuntimeError(f"{PACKAGE}/__init__.py has no __version__ = \"...\" line")
    return m.group(1)


def dist_info():
    return f"{NAME}-{version()}.dist-info"


def metadata():
    """The core metadata (version 2.1), with the README as the description."""
    lines = ["Metadata-Version: 2.1", f"Name: {NAME}", f"Version: {version()}"]
    lines += [f"{k}: {v}" for k, v in METADATA_FIELDS]
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return ("\n".join(lines) + "\n\n" + readme).encode("utf-8")


WHEEL = b"""Wheel-Version: 1.0
Generator: compactd_build
Root-Is-Purelib: true
Tag: py3-none-any
"""


def package_files():
    """The package's files, relative to ROOT, sorted; no bytecode."""
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, PACKAGE)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in filenames:
            if name.endswith((".pyc", ".pyo")):
                continue
            out.append(os.path.relpath(os.path.join(dirpath, name), ROOT).replace(os.sep, "/"))
    return sorted(out)


def read(rel):
    with open(os.path.join(ROOT, rel), "rb") as f:
        return f.read()


def record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode("ascii")


def write_wheel(wheel_directory, files):
    """Writes a wheel holding files (archive name -> bytes), plus the
    dist-info every wheel has; returns its file name."""
    info = dist_info()
    files = dict(files)
    files[f"{info}/METADATA"] = metadata()
    files[f"{info}/WHEEL"] = WHEEL
    record = f"{info}/RECORD"
    rows = [f"{name},{record_hash(data)},{len(data)}" for name, data in files.items()]
    rows.append(f"{record},,")
    files[record] = ("\n".join(rows) + "\n").encode("utf-8")

    name = f"{NAME}-{version()}-py3-none-any.whl"
    path = os.path.join(wheel_directory, name)
    tmp = path + ".tmp"
    date = time.gmtime(max(EPOCH, 315532800))[:6]
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, data in files.items():  # RECORD last, as PEP 427 recommends
            zi = zipfile.ZipInfo(arcname, date_time=date)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    os.replace(tmp, path)
    return name


# PEP 517 hooks.


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = dist_info()
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    for name, data in (("METADATA", metadata()), ("WHEEL", WHEEL)):
        with open(os.path.join(metadata_directory, info, name), "wb") as f:
            f.write(data)
    return info


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return write_wheel(wheel_directory, {rel: read(rel) for rel in package_files()})


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{version()}"
    name = base + ".tar.gz"
    path = os.path.join(sdist_directory, name)
    tmp = path + ".tmp"
    files = {"PKG-INFO": metadata()}
    for rel in SDIST_FILES + package_files():
        files[rel] = read(rel)
    with tarfile.open(tmp, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for rel, data in sorted(files.items()):
            ti = tarfile.TarInfo(f"{base}/{rel}")
            ti.size, ti.mtime, ti.mode = len(data), EPOCH, 0o644
            tar.addfile(ti, io.BytesIO(data))
    os.replace(tmp, path)
    return name


# PEP 660 hooks: `pip install -e ./clients/python` puts the source
# directory on sys.path through a .pth file, so edits take effect at once.


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    pth = (ROOT + "\n").encode("utf-8")
    return write_wheel(wheel_directory, {f"__editable__.{NAME}.pth": pth})
